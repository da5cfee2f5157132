"""Keypoint sets as data: the built-in COCO-17 set, user YAML files and their validation errors."""

from __future__ import annotations

import re

import pytest
import yaml

from datamodules.keypoints.metainfo import KeypointMetainfo, MetainfoError, load_metainfo, parse_metainfo

COCO_SIGMAS = [0.026, 0.025, 0.025, 0.035, 0.035, 0.079, 0.079, 0.072, 0.072,
               0.062, 0.062, 0.107, 0.107, 0.087, 0.087, 0.089, 0.089]


def test_coco17_builtin():
    meta = load_metainfo("coco17")
    assert isinstance(meta, KeypointMetainfo)
    assert meta.name == "coco17"
    assert meta.num_keypoints == 17
    assert len(set(meta.keypoint_names)) == 17
    assert meta.keypoint_names[0] == "nose" and meta.keypoint_names[-1] == "right_ankle"
    assert list(meta.sigmas) == pytest.approx(COCO_SIGMAS)
    pairs = meta.flip_pairs
    assert len(pairs) == 8
    # Each pair is [left_x, right_x]: the partner of a left_* keypoint is its right_* twin.
    for left, right in pairs:
        assert meta.keypoint_names[left].replace("left_", "right_") == meta.keypoint_names[right]
    # flip_indices is an involution (symmetric) and fixes the nose only.
    flip = meta.flip_indices
    assert all(flip[flip[k]] == k for k in range(17))
    assert [k for k in range(17) if flip[k] == k] == [meta.index("nose")]
    assert flip[meta.index("left_wrist")] == meta.index("right_wrist")
    assert len(meta.skeleton) == 19
    assert (meta.index("left_ankle"), meta.index("left_knee")) in meta.skeleton
    assert set(meta.upper_body_ids) | set(meta.lower_body_ids) == set(range(17))
    assert not set(meta.upper_body_ids) & set(meta.lower_body_ids)


def _valid() -> dict:
    return {
        "name": "toy",
        "keypoints": ["head", "left_hand", "right_hand", "left_foot", "right_foot", "l_toe", "r_toe"],
        "sigmas": [0.03, 0.05, 0.05, 0.08, 0.08, 0.09, 0.09],
        "skeleton": [["head", "left_hand"], ["head", "right_hand"], ["left_foot", "l_toe"]],
        "upper_body": ["head", "left_hand", "right_hand"],
        "lower_body": ["left_foot", "right_foot", "l_toe", "r_toe"],
        "swap": {"l_toe": "r_toe"},
    }


def _write(tmp_path, data, name="toy.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def test_user_yaml_loads(tmp_path):
    path = _write(tmp_path, _valid())
    meta = load_metainfo(str(path))
    assert meta.name == "toy"
    assert meta.source == str(path)
    assert meta.num_keypoints == 7
    assert meta.sigmas == (0.03, 0.05, 0.05, 0.08, 0.08, 0.09, 0.09)
    # left_/right_ names pair automatically; l_toe/r_toe only through 'swap'.
    assert meta.flip_indices == (0, 2, 1, 4, 3, 6, 5)
    assert meta.flip_pairs == [[1, 2], [3, 4], [5, 6]]
    assert meta.skeleton == ((0, 1), (0, 2), (3, 5))
    assert meta.upper_body_ids == (0, 1, 2)
    assert meta.lower_body_ids == (3, 4, 5, 6)


def test_user_yaml_name_defaults_to_file_stem(tmp_path):
    data = _valid()
    del data["name"]
    meta = load_metainfo(str(_write(tmp_path, data, "my_points.yaml")))
    assert meta.name == "my_points"


def _assert_error(tmp_path, data, field, *fragments):
    path = _write(tmp_path, data)
    with pytest.raises(MetainfoError) as info:
        load_metainfo(str(path))
    message = str(info.value)
    assert str(path) in message, message
    assert f"'{field}'" in message, message
    for fragment in fragments:
        assert fragment in message, message
    return message


def test_duplicate_names(tmp_path):
    data = _valid()
    data["keypoints"][4] = "left_foot"
    _assert_error(tmp_path, data, "keypoints", "left_foot", "unique")


def test_wrong_sigma_count(tmp_path):
    data = _valid()
    data["sigmas"] = data["sigmas"][:-1]
    _assert_error(tmp_path, data, "sigmas", "(7)", "got 6")


def test_missing_sigmas(tmp_path):
    data = _valid()
    del data["sigmas"]
    _assert_error(tmp_path, data, "sigmas")


def test_non_positive_sigma(tmp_path):
    data = _valid()
    data["sigmas"][2] = 0
    _assert_error(tmp_path, data, "sigmas", "positive")


def test_left_without_right(tmp_path):
    data = _valid()
    data["keypoints"].append("left_foo")
    data["sigmas"].append(0.05)
    _assert_error(tmp_path, data, "keypoints", "'left_foo'", "'right_foo'")


def test_unknown_name_in_skeleton(tmp_path):
    data = _valid()
    data["skeleton"].append(["head", "tail"])
    _assert_error(tmp_path, data, "skeleton", "tail")


def test_malformed_skeleton_link(tmp_path):
    data = _valid()
    data["skeleton"].append(["head"])
    _assert_error(tmp_path, data, "skeleton", "pair")


def test_unknown_name_in_upper_body(tmp_path):
    data = _valid()
    data["upper_body"].append("neck")
    _assert_error(tmp_path, data, "upper_body", "neck")


def test_unknown_name_in_lower_body(tmp_path):
    data = _valid()
    data["lower_body"].append("tail")
    _assert_error(tmp_path, data, "lower_body", "tail")


def test_asymmetric_swap(tmp_path):
    data = _valid()
    data["keypoints"].append("c_toe")
    data["sigmas"].append(0.09)
    # l_toe -> r_toe, r_toe -> c_toe: r_toe's partner does not point back.
    data["swap"] = {"l_toe": "r_toe", "r_toe": "c_toe"}
    _assert_error(tmp_path, data, "swap", "symmetric")


def test_swap_to_unknown_keypoint(tmp_path):
    data = _valid()
    data["swap"] = {"l_toe": "x_toe", "r_toe": "l_toe"}
    _assert_error(tmp_path, data, "swap", "x_toe")


def test_unknown_builtin_name():
    with pytest.raises(MetainfoError) as info:
        load_metainfo("coco18")
    message = str(info.value)
    assert "coco18" in message
    assert "coco17" in message  # lists the built-in sets


def test_missing_file(tmp_path):
    path = tmp_path / "absent.yaml"
    with pytest.raises(MetainfoError, match=re.escape(str(path))):
        load_metainfo(str(path))


def test_invalid_yaml_names_file(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("keypoints: [a, b\nsigmas: ]")
    with pytest.raises(MetainfoError, match=re.escape(str(path))):
        load_metainfo(str(path))


def test_parse_rejects_non_mapping():
    with pytest.raises(MetainfoError, match="src.yaml"):
        parse_metainfo(["nose"], "src.yaml")


# ------------------------------------------------------------------ groups
def test_groups_load_in_file_order_and_round_trip(tmp_path):
    data = _valid()
    data["groups"] = {"feet": ["left_foot", "right_foot", "l_toe", "r_toe"], "hands": ["left_hand", "right_hand"]}
    meta = load_metainfo(str(_write(tmp_path, data)))
    assert meta.group_ids == {"feet": [3, 4, 5, 6], "hands": [1, 2]}
    assert list(meta.group_ids) == ["feet", "hands"]
    again = parse_metainfo(meta.to_dict(), meta.source)
    assert again == meta and again.to_dict()["groups"] == data["groups"]


def test_groups_are_optional_and_coco17_has_none(tmp_path):
    assert load_metainfo(str(_write(tmp_path, _valid()))).group_ids == {}
    assert load_metainfo("coco17").group_ids == {}
    assert "groups" not in load_metainfo("coco17").to_dict()


def test_group_with_unknown_name(tmp_path):
    data = _valid()
    data["groups"] = {"hands": ["left_hand", "left_paw"]}
    _assert_error(tmp_path, data, "groups", "'hands'", "left_paw")


@pytest.mark.parametrize("group, members, fragment", [
    ("two words", ["head"], "letters, digits"),
    ("hands", [], "non-empty list"),
    ("hands", "left_hand", "group 'hands' names a set: unknown keypoint set 'left_hand'"),
    ("hands", [["left_hand"]], "non-empty list"),
    ("hands", ["left_hand", "left_hand"], "repeats ['left_hand']"),
])
def test_malformed_group(tmp_path, group, members, fragment):
    data = _valid()
    data["groups"] = {group: members}
    _assert_error(tmp_path, data, "groups", fragment)


def test_groups_must_be_a_mapping(tmp_path):
    data = _valid()
    data["groups"] = [["head"]]
    _assert_error(tmp_path, data, "groups", "must map")


def test_builtin_sets_are_listed_in_the_error():
    with pytest.raises(MetainfoError) as info:
        load_metainfo("coco18")
    for name in ("coco17", "coco_wholebody", "sapiens2_308"):
        assert name in str(info.value)
