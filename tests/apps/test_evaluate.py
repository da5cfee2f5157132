"""``python -m sapiens2_ft.evaluate``: a model trained briefly here, scored from its checkpoint and from its export,
gives the run's own final validation metrics; pose's predictions.json re-scored by pycocotools gives the same AP;
bad input is a clear error."""

from __future__ import annotations

import csv
import json
import shutil

import numpy as np
import pytest

from sapiens2_ft import evaluate
from sapiens2_ft.training.cli import main as train

VAL_ANN = "annotations/person_keypoints_val2017.json"
# The same weights through the same validation loop; across a checkpoint and its export only the fp32 weights'
# round trip through safetensors differs (bit-equal here): 1e-5 relative leaves room for a BLAS order change.
RTOL = 1e-5


def _pose_data(coco) -> list[str]:
    return ["--config", "pose_coco.yaml", "--data.root", str(coco), "--data.batch_size", "2", "--data.num_workers", "0"]


def _close(found: dict, expected: dict) -> None:
    assert set(found) == set(expected), (sorted(found), sorted(expected))
    for key, value in expected.items():
        assert found[key] == pytest.approx(value, rel=RTOL, abs=1e-7), (key, found[key], value)


def _own_export(run_dir, tmp_path):
    """A copy of the shared run's export: evaluate refreshes an export's model card, which other tests read."""
    return shutil.copytree(run_dir / "export", tmp_path / "model")


def _val_row(run_dir, step: int) -> dict:
    with open(run_dir / "metrics.csv") as f:
        rows = [r for r in csv.DictReader(f) if r.get("val/loss") and int(r["step"]) + 1 == step]
    return {k.removeprefix("val/"): float(v) for k, v in rows[-1].items() if k.startswith("val/") and v}


@pytest.mark.slow
def test_pose_checkpoint_and_export_give_the_runs_metrics(pose_run, tiny_coco, tmp_path):
    from pycocotools.coco import COCO
    from pycocotools.cocoeval import COCOeval

    from datamodules.keypoints.metainfo import load_metainfo

    run_dir, summary = pose_run
    last = evaluate.main([*_pose_data(tiny_coco), "--model", str(run_dir / "checkpoints" / "last.ckpt"),
                          "--out", str(tmp_path / "last")])
    print("run", summary["metrics"], "\nevaluate", last["metrics"])
    _close(last["metrics"], summary["metrics"])  # the final validation is of last.ckpt's weights
    assert last["step"] == summary["global_step"] and last["metrics"]["loss"] > 0

    results = json.loads((tmp_path / "last" / "predictions.json").read_text())
    assert results and {"image_id", "keypoints", "score", "category_id"} <= set(results[0])
    gt = COCO(str(tiny_coco / VAL_ANN))
    check = COCOeval(gt, gt.loadRes(results), "keypoints")
    check.params.kpt_oks_sigmas = np.asarray(load_metainfo("coco17").sigmas)
    check.evaluate()
    check.accumulate()
    check.summarize()
    assert check.stats[0] == pytest.approx(last["metrics"]["AP"], abs=1e-9)
    assert check.stats[5] == pytest.approx(last["metrics"]["AR"], abs=1e-9)

    best = summary["best_checkpoint"]  # the export is of the best checkpoint; the recipe settings are the run's
    exported = evaluate.main([*_pose_data(tiny_coco), "--model.sigma", "2", "--model",
                              str(_own_export(run_dir, tmp_path)), "--out", str(tmp_path / "export")])
    _close(exported["metrics"], _val_row(run_dir, int(best.rsplit("step", 1)[1].split(".")[0])))
    for name in ("metrics.json", "diagnostics/keypoints.csv", "panels/pose_0.png"):
        assert (tmp_path / "export" / name).is_file(), name


@pytest.mark.slow
def test_seg_checkpoint_and_export_give_the_runs_metrics(dense_root, tmp_path):
    data = ["--config", "seg_custom.yaml", "--data.root", str(dense_root), "--data.batch_size", "2",
            "--data.num_workers", "0"]
    summary = train([*data, "--run_dir", str(tmp_path / "run"), "--model.pretrained", "null", "--model.size", "tiny",
                     "--data.input_size", "[128, 96]", "--trainer.max_steps", "2", "--trainer.val_check_interval", "2",
                     "--trainer.accelerator", "cpu", "--trainer.devices", "1", "--trainer.enable_progress_bar",
                     "false", "--tracking.logger", "csv", "--trainer.num_sanity_val_steps", "0"])
    from_checkpoint = evaluate.main([*data, "--model", summary["last_checkpoint"], "--out", str(tmp_path / "ckpt")])
    _close(from_checkpoint["metrics"], summary["metrics"])
    assert from_checkpoint["input_size"] == [128, 96]  # the model's own, the recipe says 1024x768
    assert 0 < from_checkpoint["metrics"]["aAcc"] <= 1 and from_checkpoint["metrics"]["loss"] > 0
    exported = evaluate.main([*data, "--model", str(tmp_path / "run" / "export"), "--out", str(tmp_path / "exp")])
    _close(exported["metrics"], summary["metrics"])  # two steps, one validation: best = last
    assert list((tmp_path / "exp" / "predictions").glob("*.png")) and (tmp_path / "exp" / "panels").is_dir()
    assert (tmp_path / "exp" / "diagnostics" / "classes.csv").is_file() or list((tmp_path / "exp" /
                                                                                 "diagnostics").glob("*.csv"))


def test_bad_input_is_a_clear_error(pose_run, tiny_coco, tmp_path):
    run_dir, _ = pose_run
    export = ["--model", str(run_dir / "export"), "--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit, match="holds a Sapiens2ForPoseEstimation .*the config trains seg"):
        evaluate.main(["--config", "seg_custom.yaml", *export])
    with pytest.raises(SystemExit, match=r"export has no keypoint \['left_big_toe', .*\(116 of the 133 asked for\)"):
        evaluate.main([*_pose_data(tiny_coco), "--data.keypoints", "coco_wholebody", *export])
    with pytest.raises(SystemExit, match="annotation file not found"):
        evaluate.main([*_pose_data(tmp_path / "nowhere"), *export])
    with pytest.raises(SystemExit, match="is a pose checkpoint; the config trains seg"):
        evaluate.main(["--config", "seg_custom.yaml", "--model", str(run_dir / "checkpoints" / "last.ckpt")])
    with pytest.raises(SystemExit, match="--config: give the recipe"):
        evaluate.main(export)


@pytest.mark.slow
def test_pose_boxes_from_a_detector(pose_run, tiny_coco, tiny_detector_dir, tmp_path):
    """--detector: the boxes are found first (detect's own json, in --out) and cropped instead of the ground truth's."""
    from datamodules.coco_keypoints import load_detections
    from datamodules.keypoints.metainfo import load_metainfo

    run_dir, _ = pose_run
    out = tmp_path / "det"
    found = evaluate.main([*_pose_data(tiny_coco), "--model", str(_own_export(run_dir, tmp_path)), "--out", str(out),
                           "--detector", str(tiny_detector_dir), "--det_threshold", "0.005"])
    boxes = json.loads((out / "val_detections.json").read_text())
    instances, _ = load_detections(out / "val_detections.json", tiny_coco / VAL_ANN, tiny_coco / "val2017",
                                   load_metainfo("coco17"))
    assert boxes and found["samples"] == len(instances) > 0
    results = json.loads((out / "predictions.json").read_text())
    assert 0 < len(results) <= len(boxes)  # one person per box, fewer after OKS-NMS
    assert {r["image_id"] for r in results} <= {b["image_id"] for b in boxes}
