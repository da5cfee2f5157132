"""The data check: a corpus of broken datasets, one defect each, across the pose and dense layouts; the
skip policy trains through bad samples; the error policy stops before training with every problem."""

from __future__ import annotations

import json
import warnings
import shutil

import cv2
import numpy as np
import pytest
from conftest import pose_run_args, write_coco

from datamodules.data_check import DataReport, check_coco, check_dense
from datamodules.keypoints.metainfo import load_metainfo
from sapiens2_ft import check_data
from sapiens2_ft.tasks.dense_data import dense_targets
from sapiens2_ft.training.cli import main

TRAIN_ANN = "annotations/person_keypoints_train2017.json"


@pytest.fixture
def coco(tmp_path):
    root = tmp_path / "coco"
    write_coco(root, "train2017", "person_keypoints_train2017.json", num_images=3, seed=0)
    write_coco(root, "val2017", "person_keypoints_val2017.json", num_images=2, seed=1)
    return root


def edit_json(path, change) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def truncate(path) -> None:
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])


POSE_DEFECTS = {
    # defect: (make it, expected file (relative to root), record, field, words of the message)
    "truncated image": (lambda r: truncate(r / "train2017/000001.jpg"),
                        "train2017/000001.jpg", "image 2", "image", "decodable image"),
    "missing image file": (lambda r: (r / "train2017/000002.jpg").unlink(),
                           "train2017/000002.jpg", "image 3", "file_name", "image file not found"),
    "wrong keypoint count": (lambda r: edit_json(r / TRAIN_ANN, lambda d: d["annotations"][0].update(
        keypoints=d["annotations"][0]["keypoints"][:48])),
        TRAIN_ANN, "annotation 1", "keypoints", "48 numbers, expected 51 (17 keypoints of set 'coco17'"),
    "negative bbox": (lambda r: edit_json(r / TRAIN_ANN, lambda d: d["annotations"][1]["bbox"].__setitem__(2, -5.0)),
                      TRAIN_ANN, "annotation 2", "bbox", "width and height > 0"),
    "duplicate image id": (lambda r: edit_json(r / TRAIN_ANN, lambda d: d["images"][1].update(id=1)),
                           TRAIN_ANN, "image 1", "id", "image id 1 is used by more than one image"),
    "visibility flag 3": (lambda r: edit_json(r / TRAIN_ANN,
                                              lambda d: d["annotations"][2]["keypoints"].__setitem__(2, 3)),
                          TRAIN_ANN, "annotation 3", "keypoints", "visibility flags in {0, 1, 2}, got [3]"),
    "image size half stated": (lambda r: edit_json(r / TRAIN_ANN, lambda d: d["images"][0].pop("height")),
                               "train2017/000000.jpg", "image 1", "width/height", "json says 192x?, the file is"),
    "category not an object": (lambda r: edit_json(r / TRAIN_ANN, lambda d: d["categories"].append("person")),
                               TRAIN_ANN, "categories[1]", "category", "an object with 'id', got 'person'"),
}


@pytest.mark.parametrize("defect", sorted(POSE_DEFECTS))
def test_pose_defect_is_reported_with_file_record_and_field(coco, defect):
    make, file, record, field, words = POSE_DEFECTS[defect]
    make(coco)
    report = DataReport()
    check_coco(coco / TRAIN_ANN, coco / "train2017", load_metainfo("coco17"), report, "train")
    # a duplicated id also leaves the other image's two annotations pointing at an id no image has
    assert len(report.fatal) == (3 if defect == "duplicate image id" else 1), report.format()
    problem = report.fatal[0]
    assert (problem.file, problem.record, problem.field) == (str(coco / file), record, field), problem
    assert words in problem.expected, problem


def _sample(root, task):
    return sorted((root / "train" / "images").iterdir())[1].stem


DENSE_DEFECTS = {
    "label 77 in a 29-class set": ("seg", "labels", lambda root, name: cv2.imwrite(
        str(root / f"train/labels/{name}.png"), np.full((256, 192), 77, np.uint8)),
        "label values [77] outside the 29-class set"),
    "NaN normal": ("normal", "normals", lambda root, name: _edit_npy(root / f"train/normals/{name}.npy", np.nan),
                   "normals contain NaN or inf"),
    "depth of zero": ("pointmap", "depth", lambda root, name: _edit_npy(root / f"train/depth/{name}.npy", 0.0),
                      "depth must be finite and > 0 on the valid mask"),
    "2x3 intrinsics": ("pointmap", "intrinsics", lambda root, name: np.savetxt(
        root / f"train/intrinsics/{name}.txt", np.eye(3)[:2]), "intrinsics must be 3x3, got 2x3"),
}
SUFFIX = {"labels": ".png", "normals": ".npy", "depth": ".npy", "intrinsics": ".txt"}


def _edit_npy(path, value) -> None:
    array = np.load(path)
    array[array.shape[0] // 2, array.shape[1] // 2] = value
    np.save(path, array)


@pytest.mark.parametrize("defect", sorted(DENSE_DEFECTS))
def test_dense_defect_is_reported_with_file_record_and_field(dense_root, tmp_path, defect):
    task, field, make, words = DENSE_DEFECTS[defect]
    root = tmp_path / "dense"
    shutil.copytree(dense_root, root)
    name = _sample(root, task)
    make(root, name)
    report = DataReport()
    check_dense(root, "train", dense_targets(task), 29, report)
    assert len(report.fatal) == 1, report.format()
    (problem,) = report.fatal
    folder = {"labels": "labels", "normals": "normals", "depth": "depth", "intrinsics": "intrinsics"}[field]
    expected_file = root / "train" / folder / f"{name}{SUFFIX[field]}"
    assert (problem.file, problem.record, problem.field) == (str(expected_file), f"sample {name}", field), problem
    assert words in problem.expected, problem


def test_check_data_cli_lists_every_problem_and_exits_nonzero(coco, capsys):
    defects = ("truncated image", "wrong keypoint count", "missing image file")
    for defect in defects:
        POSE_DEFECTS[defect][0](coco)
    args = ["--config", "pose_coco.yaml", "--data.root", str(coco), "--data.input_size", "[256, 192]"]
    assert check_data.main(args) == 1
    out = capsys.readouterr().out
    assert "checked train: 2 images, 6 annotations" in out and "3 problems (3 fatal)" in out
    for defect in defects:
        _, file, record, field, words = POSE_DEFECTS[defect]
        assert f"{coco / file}: {record}: {field}: " in out and words in out, defect


def test_check_data_cli_passes_clean_dense_data(dense_root, capsys):
    args = ["--config", "normal_demo.yaml", "--data.root", str(dense_root), "--data.synthetic", "null"]
    assert check_data.main(args) == 0
    assert "no problems found" in capsys.readouterr().out


def test_error_policy_stops_before_training_with_every_problem(coco, tiny_pose308_dir, tmp_path):
    for defect in ("wrong keypoint count", "negative bbox"):
        POSE_DEFECTS[defect][0](coco)
    with pytest.raises(SystemExit, match="data.on_bad_sample: skip") as err:  # a message, not a traceback
        main(pose_run_args(coco, tiny_pose308_dir, tmp_path / "run", 2, "--tracking.logger", "csv"))
    assert "annotation 1: keypoints: 48 numbers" in str(err.value.code)  # both problems, in one report
    assert "annotation 2: bbox: width and height > 0" in str(err.value.code)
    assert not (tmp_path / "run" / "checkpoints").exists()  # nothing trained


def test_skip_policy_trains_through_bad_samples_and_reports_them(coco, tiny_pose308_dir, tmp_path):
    for defect in ("truncated image", "wrong keypoint count"):
        POSE_DEFECTS[defect][0](coco)
    summary = main(pose_run_args(coco, tiny_pose308_dir, tmp_path / "run", 4, "--tracking.logger", "csv",
                                 "--export", "false", "--data.on_bad_sample", "skip"))
    assert summary["global_step"] == 4
    assert summary["skipped_samples"]["train"] == {"bad record": 1}  # found by the check before training
    # the truncated image's 2 people are found unreadable while loading and replaced, every epoch
    assert summary["bad_samples_replaced"]["train"] >= 2


def test_check_data_prints_its_report_once(coco, capsys, tmp_path):
    """issue 60: with --show, the data module's own check at its set-up reported the same problems again (a warning
    under the sheet); now the report is printed once, by check_data."""
    edit_json(coco / TRAIN_ANN, lambda d: d["annotations"][0]["bbox"].__setitem__(0, 150.0))  # past the right edge
    args = ["--config", "pose_coco.yaml", "--data.root", str(coco), "--data.input_size", "[256, 192]",
            "--data.num_workers", "0", "--data.batch_size", "2", "--show", "2", "--out", str(tmp_path)]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert check_data.main(args) == 0
    out = capsys.readouterr().out
    assert out.count("problems (0 fatal)") == 1 and "[warning] bbox: 1" in out
    assert not [w for w in caught if "the data check found problems" in str(w.message)]
    assert (tmp_path / "data_check.png").is_file()
