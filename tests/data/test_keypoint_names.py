"""Keypoints matched by name: a json that lists the run's keypoint names in another order trains and scores the
same as one in the set's order; names that differ stop with both lists; keypoints outside their crop are counted."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from conftest import COCO17, write_coco

from datamodules.coco_keypoints import load_instances
from datamodules.data_check import DataReport, check_coco
from datamodules.errors import DataError
from datamodules.keypoints.metainfo import MetainfoError, load_metainfo
from sapiens2_ft.tasks.pose.metric import CocoKeypointAP

PERMUTATION = np.random.default_rng(3).permutation(17)


@pytest.fixture
def jsons(tmp_path):
    """(the set's order, the same annotations with the names and triplets shuffled, images folder)."""
    ordered = write_coco(tmp_path, "train/images", "train.json", num_images=3, seed=0)
    data = json.loads(ordered.read_text())
    data["categories"][0]["keypoints"] = [COCO17[k].replace("_", " ").title() for k in PERMUTATION]  # "Left Eye"
    for ann in data["annotations"]:
        ann["keypoints"] = np.asarray(ann["keypoints"]).reshape(17, 3)[PERMUTATION].ravel().tolist()
    shuffled = tmp_path / "annotations" / "shuffled.json"
    shuffled.write_text(json.dumps(data))
    return ordered, shuffled, tmp_path / "train" / "images"


def test_another_order_is_remapped_by_name(jsons, caplog):
    ordered, shuffled, images = jsons
    metainfo = load_metainfo("coco17")
    expected, _ = load_instances(ordered, images, metainfo)
    with caplog.at_level("INFO"):
        remapped, _ = load_instances(shuffled, images, metainfo)
    assert len(remapped) == len(expected) == 6
    for a, b in zip(remapped, expected):
        np.testing.assert_array_equal(a.keypoints, b.keypoints)
        np.testing.assert_array_equal(a.visibility, b.visibility)
    assert sum("in another order: taken by name" in r.getMessage() for r in caplog.records) == 1
    report = DataReport()
    check_coco(shuffled, images, metainfo, report, "train")
    assert not report.fatal and len(report.problems) == 1, report.format()
    assert "in another order: taken by name (when training" in report.problems[0].expected


def test_the_metric_scores_a_shuffled_ground_truth_by_name(jsons):
    """Predictions in the set's order equal to the ground truth score AP 1 against the shuffled json."""
    ordered, shuffled, _ = jsons
    gt = json.loads(ordered.read_text())["annotations"]
    scores = {}
    for name, ann_file in (("ordered", ordered), ("shuffled", shuffled)):
        metric = CocoKeypointAP(ann_file, load_metainfo("coco17").sigmas, keypoint_names=COCO17)
        points = torch.tensor(np.array([np.reshape(a["keypoints"], (17, 3))[:, :2] for a in gt]), dtype=torch.float32)
        metric.update(torch.tensor([a["image_id"] for a in gt]), points, torch.ones(len(gt), 17),
                      torch.ones(len(gt)), torch.tensor([a["area"] for a in gt], dtype=torch.float32))
        scores[name] = float(metric.compute()["AP"])
    assert scores == {"ordered": pytest.approx(1.0), "shuffled": pytest.approx(1.0)}
    blind = CocoKeypointAP(shuffled, load_metainfo("coco17").sigmas)  # no names: the json's order, as before
    blind.update(torch.tensor([a["image_id"] for a in gt]), points, torch.ones(len(gt), 17), torch.ones(len(gt)),
                 torch.tensor([a["area"] for a in gt], dtype=torch.float32))
    assert float(blind.compute()["AP"]) < 0.5


def test_other_names_stop_with_both_lists(jsons):
    ordered, _, images = jsons
    data = json.loads(ordered.read_text())
    data["categories"][0]["keypoints"][11] = "left_heel"
    ordered.write_text(json.dumps(data))
    with pytest.raises(DataError) as err:
        load_instances(ordered, images, load_metainfo("coco17"))
    message = str(err.value)
    assert "names the set lacks: ['left_heel']" in message and "names of the set it lacks: ['left_hip']" in message
    assert "json (17): ['nose'" in message and "set  (17): ['nose'" in message and "data.keypoints" in message
    report = DataReport()
    check_coco(ordered, images, load_metainfo("coco17"), report, "train")
    assert [p.field for p in report.fatal] == ["keypoints"] and "left_heel" in report.fatal[0].expected


def test_keypoints_outside_the_crop_are_counted_with_the_padding_that_keeps_them(tmp_path):
    ann_file = write_coco(tmp_path, "train/images", "train.json", num_images=1, people_per_image=1)
    data = json.loads(ann_file.read_text())
    ann = data["annotations"][0]
    x, y, w, h = ann["bbox"]
    ann["bbox"] = [x, y, w, h / 2]  # the legs' keypoints now reach beyond the padded box
    ann_file.write_text(json.dumps(data))
    points = np.reshape(ann["keypoints"], (17, 3))
    half = np.array([max(w, h / 2 * 0.75), max(h / 2, w / 0.75)]) / 2  # the box widened to W/H 0.75
    need = (np.abs(points[:, :2] - [x + w / 2, y + h / 4]) / half).max(1)
    report = DataReport()
    check_coco(ann_file, tmp_path / "train" / "images", load_metainfo("coco17"), report, "train", crop=(1.25, 0.75))
    assert not report.fatal and len(report.problems) == 1, report.format()
    problem = report.problems[0]
    assert problem.field == "keypoints" and problem.record == f"annotation 1: '{COCO17[int(np.argmax(need))]}'"
    assert f"{int((need > 1.25).sum())} of 17 labelled keypoints lie outside" in problem.expected
    assert f"data.box_padding {np.ceil(need.max() * 20) / 20:g} keeps them all" in problem.expected
    kept = DataReport()
    check_coco(ann_file, tmp_path / "train" / "images", load_metainfo("coco17"), kept, "train",
               crop=(float(np.ceil(need.max() * 20) / 20), 0.75))
    assert not kept.problems, kept.format()


FEET = """name: coco17_feet
extends: coco17
keypoints: [left_heel, right_heel, left_big_toe, right_big_toe]
sigmas: [0.066, 0.066, 0.068, 0.068]
skeleton: [[left_ankle, left_heel], [left_ankle, left_big_toe], [right_ankle, right_heel], [right_ankle, right_big_toe]]
lower_body: [left_heel, right_heel, left_big_toe, right_big_toe]
groups: {body: coco17, feet: [left_heel, right_heel, left_big_toe, right_big_toe]}
"""


def test_a_set_extends_another_and_names_it_as_a_group(tmp_path):
    (tmp_path / "feet.yaml").write_text(FEET)
    feet, coco = load_metainfo(str(tmp_path / "feet.yaml")), load_metainfo("coco17")
    assert feet.keypoint_names == coco.keypoint_names + ("left_heel", "right_heel", "left_big_toe", "right_big_toe")
    assert feet.sigmas == coco.sigmas + (0.066, 0.066, 0.068, 0.068)
    assert feet.skeleton[:len(coco.skeleton)] == coco.skeleton and (15, 17) in feet.skeleton  # left_ankle-left_heel
    assert feet.flip_indices == coco.flip_indices + (18, 17, 20, 19)
    assert feet.lower_body_ids == coco.lower_body_ids + (17, 18, 19, 20)
    assert feet.group_ids == {"body": list(range(17)), "feet": [17, 18, 19, 20]}
    (tmp_path / "bad.yaml").write_text("extends: coco99\nkeypoints: [tail]\nsigmas: [0.1]\n")
    with pytest.raises(MetainfoError, match=r"bad.yaml: field 'extends': unknown keypoint set 'coco99'"):
        load_metainfo(str(tmp_path / "bad.yaml"))


def test_a_json_with_more_keypoints_trains_the_runs_set_by_name(tmp_path, caplog):
    """A 21-keypoint json (COCO-17 + feet) read as coco17: the 17 taken by name, the feet named as not used."""
    (tmp_path / "feet.yaml").write_text(FEET)
    ann_file = write_coco(tmp_path, "train/images", "train.json", num_images=2)
    data = json.loads(ann_file.read_text())
    for ann in data["annotations"]:
        ann["keypoints"] += [10.0, 20.0, 2.0] * 4
    data["categories"][0]["keypoints"] = COCO17 + ["left_heel", "right_heel", "left_big_toe", "right_big_toe"]
    ann_file.write_text(json.dumps(data))
    with caplog.at_level("INFO"):
        as_coco, _ = load_instances(ann_file, tmp_path / "train" / "images", load_metainfo("coco17"))
    as_feet, _ = load_instances(ann_file, tmp_path / "train" / "images", load_metainfo(str(tmp_path / "feet.yaml")))
    np.testing.assert_array_equal(as_coco[0].keypoints, as_feet[0].keypoints[:17])
    assert as_feet[0].keypoints.shape == (21, 2) and (as_feet[0].keypoints[17:] == [10, 20]).all()
    assert any("not used: ['left_heel', 'right_heel', 'left_big_toe', 'right_big_toe']" in r.getMessage()
               for r in caplog.records)


def test_the_metric_scores_the_runs_set_of_a_json_with_more_keypoints(tmp_path):
    """Ground truth of 21 keypoints (COCO-17 + feet, feet first) scored as coco17: the 17 taken by name."""
    ann_file = write_coco(tmp_path, "val/images", "val.json", num_images=2)
    data = json.loads(ann_file.read_text())
    for ann in data["annotations"]:
        ann["keypoints"] = [5.0, 5.0, 2.0] * 4 + ann["keypoints"]
    data["categories"][0]["keypoints"] = ["left_heel", "right_heel", "left_big_toe", "right_big_toe"] + COCO17
    (tmp_path / "wide.json").write_text(json.dumps(data))
    gt = data["annotations"]
    metric = CocoKeypointAP(tmp_path / "wide.json", load_metainfo("coco17").sigmas, keypoint_names=COCO17)
    points = torch.tensor(np.array([np.reshape(a["keypoints"][12:], (17, 3))[:, :2] for a in gt]), dtype=torch.float32)
    metric.update(torch.tensor([a["image_id"] for a in gt]), points, torch.ones(len(gt), 17), torch.ones(len(gt)),
                  torch.tensor([a["area"] for a in gt], dtype=torch.float32))
    assert float(metric.compute()["AP"]) == pytest.approx(1.0)
