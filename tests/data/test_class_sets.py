"""Class sets of segmentation: the YAML (built-ins, merges, new classes, extends), its hostile forms, and the label
files mapped onto a set by name."""

from __future__ import annotations

import numpy as np
import pytest

from datamodules.body_parts import SAPIENS2_PART_CLASSES
from datamodules.classes.class_set import ClassSetError, load_class_set, parse_class_set, plain_set
from datamodules.errors import DataError, RefusedInput

MY_PARTS = """name: my_parts
extends: coarse
classes:
  - {name: Bag, colour: [10, 20, 30]}
"""


def write(folder, name, text):
    (folder / name).write_text(text)
    return folder / name


def test_coarse_takes_each_of_the_29_once_and_maps_their_labels():
    coarse = load_class_set("coarse")
    assert coarse.names == ("Background", "Head", "Hair", "Upper_Body", "Arms", "Hands", "Legs", "Feet")
    taken = [s for rows in coarse.sources for s in rows]
    assert sorted(taken) == sorted(SAPIENS2_PART_CLASSES)  # every part in exactly one class
    table = coarse.label_table(SAPIENS2_PART_CLASSES, "test")
    for part, i in zip(SAPIENS2_PART_CLASSES, range(29)):
        assert part in coarse.sources[table[i]]  # each label goes to the class made from it, by name
    assert table[255] == 255 and coarse.merges["Hands"] == ("Left_Hand", "Right_Hand") and coarse.new == []


def test_the_29_built_in_is_the_released_rows_and_merges_nothing():
    s29 = load_class_set("sapiens2_29")
    assert s29.names == SAPIENS2_PART_CLASSES and s29.merges == {} and s29.new == []
    assert np.array_equal(s29.label_table(SAPIENS2_PART_CLASSES, "t")[:29], np.arange(29))


def test_extends_puts_the_base_first_and_round_trips(tmp_path):
    parts = load_class_set(str(write(tmp_path, "my_parts.yaml", MY_PARTS)))
    assert parts.names == load_class_set("coarse").names + ("Bag",)
    assert parts.new == ["Bag"] and parts.colours[-1] == (10, 20, 30)
    again = parse_class_set(parts.to_dict(), "again")
    assert (again.name, again.names, again.sources, again.colours) == (parts.name, parts.names, parts.sources,
                                                                       parts.colours)


def test_labels_map_by_name_whatever_their_order_and_spelling():
    parts = parse_class_set({"classes": ["Background", {"name": "Clothes", "from": ["Upper_Clothing",
                                                                                    "Lower_Clothing"]}, "Bag"]}, "t")
    table = parts.label_table(["bag", "Lower Clothing", "background", "upper-clothing"], "data")
    assert table[:4].tolist() == [2, 1, 0, 1]


@pytest.mark.parametrize("data, fragment", [
    ({"classes": ["Torso", "Background"]}, "first class is the background"),
    ({"classes": ["Background", {"name": "A", "from": ["Torso"]}, {"name": "B", "from": ["Torso"]}]},
     "'Torso' goes into both 'A' and 'B'"),
    ({"classes": ["Background", {"name": "A", "from": ["Sky"]}]}, "unknown: ['Sky']"),
    ({"classes": ["Background", "hair", "Hair"]}, "repeated: ['Hair', 'hair']"),
    ({"classes": ["Background", "Upper Body"]}, "letters, digits and '_'"),
    ({"classes": ["Background", {"name": "A", "colour": [0, 0, 256]}]}, "'colour' is [r, g, b]"),
    ({"classes": ["Background", {"name": "A", "shape": 1}]}, "a mapping of 'name', 'from' and 'colour'"),
    ({"classes": ["Background"]}, "2 to 255 classes, got 1"),
])
def test_malformed_sets_say_what_is_wrong(data, fragment):
    with pytest.raises(ClassSetError) as err:
        parse_class_set(data, "my.yaml")
    assert fragment in str(err.value) and "my.yaml" in str(err.value)


def test_a_name_mismatch_lists_both_sets():
    with pytest.raises(DataError) as err:
        load_class_set("coarse").label_table(list(SAPIENS2_PART_CLASSES) + ["Bag"], "data/classes.txt")
    said = str(err.value)
    assert "not in the set: ['Bag']" in said and "data/classes.txt" in said
    assert "the set's 8: ['Background', 'Head'" in said and "The label files' 30 classes: ['Background', 'Apparel'" \
        in said
    with pytest.raises(DataError, match=r"never labelled: \['Hair'\]"):
        load_class_set("coarse").label_table([n for n in SAPIENS2_PART_CLASSES if n != "Hair"], "d")


# ------------------------------------------------------------------------------------------------ hostile files


def test_a_huge_class_set_is_refused_before_it_is_parsed(tmp_path):
    big = write(tmp_path, "big.yaml", "classes: [Background, Hair]\n" + "# pad\n" * 200_000)
    with pytest.raises(RefusedInput, match="above the limit of 1,048,576"):
        load_class_set(str(big))


def test_an_alias_bomb_is_refused(tmp_path):
    laughs = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join(['*' + chr(97 + i)] * 9)}]\n" for i in range(20))
    with pytest.raises(RefusedInput, match="aliases"):
        load_class_set(str(write(tmp_path, "laughs.yaml", laughs)))


def test_extends_may_not_lead_out_of_its_folder_by_path_or_link(tmp_path):
    (tmp_path / "sets").mkdir()
    write(tmp_path, "outside.yaml", "classes: [Background, Hair]\n")
    (tmp_path / "sets" / "inside.yaml").symlink_to(tmp_path / "outside.yaml")
    for base in ("../outside.yaml", "inside.yaml"):
        path = write(tmp_path / "sets", "mine.yaml", f"extends: {base}\nclasses: [Bag]\n")
        with pytest.raises(ClassSetError, match="is not inside the folder"):
            load_class_set.__wrapped__(str(path))


def test_a_cycle_of_extends_is_an_error_naming_the_files(tmp_path):
    write(tmp_path, "a.yaml", "extends: b.yaml\nclasses: [Bag]\n")
    write(tmp_path, "b.yaml", "extends: a.yaml\nclasses: [Background]\n")
    with pytest.raises(ClassSetError, match=r"leads back to itself: .*a\.yaml -> .*b\.yaml -> .*a\.yaml"):
        load_class_set(str(tmp_path / "a.yaml"))


def test_plain_names_are_the_29_by_name_or_new():
    names = plain_set(["Background", "Torso", "Sky"])
    assert names.sources == (("Background",), ("Torso",), ()) and names.merges == {} and names.new == ["Sky"]
