"""convert reads and writes through the boundary: a symbolic link in ``--out`` is never written through, a class set
is a small regular file, an annotation file linked from outside the export is not read, and an XML that declares
entities is refused unparsed."""

from __future__ import annotations

import os
import shutil
import threading
from pathlib import Path

import pytest

from sapiens2_ft.convert import ConvertError, convert
from sapiens2_ft.convert.__main__ import main as convert_main
from test_convert import make_scene, write_cvat_masks, write_cvat_xml, write_labelme

OUTPUTS = ["train/images/img1.png", "train/labels/img1.png", "annotations/train.json", "classes.txt", "train"]


@pytest.fixture
def converted(tmp_path) -> tuple[Path, Path]:
    """(export, its data set): two images with people, polygons and masks, converted once."""
    src, out = tmp_path / "src", tmp_path / "out"
    write_cvat_xml(src, [make_scene(0), make_scene(1)])
    convert("cvat", src, out)
    return src, out


@pytest.mark.parametrize("name", OUTPUTS)
def test_a_link_in_out_named_like_an_output_is_not_written_through(converted, tmp_path, capsys, name):
    src, out = converted
    outside = tmp_path / "elsewhere" / "notes"
    outside.parent.mkdir()
    if name == "train":  # a link named like a split's folder, to a folder of the user's
        shutil.move(out / "train", outside)
        before = {p.name: p.read_bytes() for p in outside.rglob("*") if p.is_file()}
    else:
        outside.write_text("the user's own file\n")
        (out / name).unlink()
        before = {outside.name: outside.read_bytes()}
    (out / name).symlink_to(outside)
    witness = out / ("annotations/train.json" if name == "train" else "train/images/img0.png")  # written first
    kept = os.stat(witness)
    assert convert_main(["cvat", str(src), "--out", str(out), "--overwrite"]) == 2
    assert f"{out / name} is a symbolic link" in capsys.readouterr().err
    after = ({p.name: p.read_bytes() for p in outside.rglob("*") if p.is_file()} if name == "train"
             else {outside.name: outside.read_bytes()})
    assert after == before and (out / name).is_symlink()
    # refused before anything was written: the other outputs are the files of the first conversion
    again = os.stat(witness)
    assert (again.st_ino, again.st_mtime_ns) == (kept.st_ino, kept.st_mtime_ns)


def test_a_link_elsewhere_in_out_is_left_alone(converted, tmp_path):
    src, out = converted
    (out / "notes.txt").symlink_to(tmp_path / "missing")  # on the way to no output file
    result = convert("cvat", src, out, overwrite=True)
    assert result.splits["train"]["images"] == 2 and (out / "notes.txt").is_symlink()


def test_a_class_set_is_a_small_regular_file(tmp_path, capsys):
    src = tmp_path / "src"
    write_cvat_xml(src, [make_scene(0)])
    fifo = tmp_path / "classes"
    os.mkfifo(fifo)
    big = tmp_path / "big.txt"
    big.write_text("".join(f"class_{i}\n" for i in range(120_000)))  # above 1 MiB
    for spec, why in ((fifo, "a FIFO, not a regular file"), (tmp_path, "a folder, not a regular file"),
                      (big, "above the limit of 1,048,576")):
        reader = threading.Thread(target=lambda: convert_main(["cvat", str(src), "--out", str(tmp_path / "out"),
                                                               "--classes", str(spec)]), daemon=True)
        reader.start()
        reader.join(20)
        assert not reader.is_alive(), f"--classes {spec} blocked"  # a FIFO is refused, not waited on
        err = capsys.readouterr().err
        assert f"--classes {spec}: " in err and why in err, err
    listed = tmp_path / "mine.txt"
    listed.write_text("background\nTorso\nHair\n")
    assert convert("cvat", src, tmp_path / "out", classes=str(listed)).classes.targets == ["background", "Torso",
                                                                                         "Hair"]


def test_annotation_files_linked_from_outside_the_export_are_not_read(tmp_path):
    secret = tmp_path / "home" / "secret.txt"
    secret.parent.mkdir()
    secret.write_text("hunter2-token:1,2,3::\n")
    # a LabelMe export with one JSON of its own and one linked to a LabelMe file outside it
    src = tmp_path / "labelme"
    write_labelme(src, make_scene(0))
    outside = tmp_path / "home" / "other.json"
    write_labelme(tmp_path / "home", make_scene(1)).rename(outside)
    (src / "img1.json").symlink_to(outside)
    result = convert("labelme", src, tmp_path / "out")
    assert result.splits["train"]["images"] == 1
    assert [(Path(p.file).name, p.field) for p in result.problems.fatal] == [("img1.json", "file")]
    assert "a link leading out" in result.problems.fatal[0].expected
    # a mask export whose labelmap.txt is a link to a private file: refused, and its lines are not shown
    masks = tmp_path / "masks"
    write_cvat_masks(masks, [make_scene(0)], ["background", "Torso", "Face_Neck", "Upper_Clothing", "hat", "Hair"])
    (masks / "labelmap.txt").unlink()
    (masks / "labelmap.txt").symlink_to(secret)
    with pytest.raises(ConvertError, match="labelmap.txt: a symbolic link leading outside the export") as err:
        convert("cvat", masks, tmp_path / "masks_out")
    assert "hunter2" not in str(err.value)


def test_an_xml_that_declares_entities_is_refused_unparsed(tmp_path):
    src = tmp_path / "src"
    write_cvat_xml(src, [make_scene(0)])
    xml = src / "annotations.xml"
    laughs = "".join(f'<!ENTITY l{k} "{f"&l{k - 1};" * 10}">' for k in range(1, 6))
    xml.write_text(xml.read_text().replace("<annotations>", f'<!DOCTYPE annotations [<!ENTITY l0 "lol">{laughs}]>'
                                           '<annotations><tag label="&l5;"/>', 1))
    with pytest.raises(ConvertError, match=r"annotations.xml: declares a document type or entities, which CVAT "
                                           r"never writes"):
        convert("cvat", src, tmp_path / "out")
    assert not (tmp_path / "out").exists()
