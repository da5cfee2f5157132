"""validate_first: a validation before the first step, of the model fine-tuning starts from."""

from __future__ import annotations

import csv

import pytest
from conftest import pose_run_args

from sapiens2_ft import evaluate
from sapiens2_ft.training.cli import main


def test_the_start_is_the_starting_models_validation(tiny_coco, tiny_pose308_dir, tmp_path, capsys):
    run_dir = tmp_path / "run"
    summary = main(pose_run_args(tiny_coco, tiny_pose308_dir, run_dir, 2, "--validate_first", "true",
                                 "--tracking.logger", "csv", "--export", "false"))
    before = evaluate.main(["--config", "pose_coco.yaml", "--model", str(tiny_pose308_dir), "--data.root",
                            str(tiny_coco), "--data.input_size", "[256, 192]", "--model.sigma", "2",
                            "--data.num_workers", "0", "--data.batch_size", "2", "--out", str(tmp_path / "eval"),
                            "--device", "cpu"])
    start, end = summary["start_metrics"], summary["metrics"]
    assert start["loss"] == pytest.approx(before["metrics"]["loss"], rel=1e-5)  # the weights before any step
    assert start["loss"] != pytest.approx(end["loss"], rel=1e-3)
    with open(run_dir / "metrics.csv") as f:
        validations = [(int(r["step"]), float(r["val/loss"])) for r in csv.DictReader(f) if r.get("val/loss")]
    assert validations[0] == (0, pytest.approx(start["loss"])) and len(validations) == 2
    out = capsys.readouterr().out
    assert out.index("start metrics: loss=") < out.index("final metrics: loss=")


def test_a_resumed_run_keeps_its_start_and_does_not_validate_it_again(tiny_coco, tiny_pose308_dir, tmp_path):
    run_dir = tmp_path / "run"
    args = ["--validate_first", "true", "--tracking.logger", "csv", "--export", "false"]
    first = main(pose_run_args(tiny_coco, tiny_pose308_dir, run_dir, 2, *args))
    resumed = main(pose_run_args(tiny_coco, tiny_pose308_dir, run_dir, 4, *args, "--resume", str(run_dir)))
    assert resumed["global_step"] == 4 and resumed.get("start_metrics") == first["start_metrics"]
    with open(run_dir / "metrics.csv") as f:
        steps = [int(r["step"]) for r in csv.DictReader(f) if r.get("val/loss")]
    assert steps == sorted(set(steps)) and len(steps) == 3, steps  # the start, after step 2, after step 4: once each
