"""``train.py`` with a teacher and unlabelled images: the run trains both terms and logs them; the config's mistakes
about it come before anything runs."""

from __future__ import annotations

import csv

import cv2
import numpy as np
import pytest

from conftest import pose_run_args
from sapiens2_ft.training.cli import main


def test_a_pose_run_with_a_teacher_and_unlabelled_images(tiny_coco, tiny_pose308_dir, tmp_path):
    photos = tmp_path / "photos"
    photos.mkdir()
    for i in range(3):
        cv2.imwrite(str(photos / f"p{i}.jpg"), np.random.default_rng(i).integers(0, 256, (120, 90, 3), np.uint8))
    run_dir = tmp_path / "run"
    summary = main(pose_run_args(tiny_coco, tiny_pose308_dir, run_dir, 2, "--model.distill.teacher",
                                 str(tiny_pose308_dir), "--data.unlabeled", str(photos), "--model.distill.weight",
                                 "2.0", "--model.distill.label_weight", "0.5", "--tracking.logger", "csv",
                                 "--export", "false", "--data.input_size", "[128, 96]"))
    assert summary["global_step"] == 2
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    logged = [r for r in rows if r.get("train/distill")]
    assert logged, "train/distill is logged"
    row = logged[0]
    total = 0.5 * float(row["train/labeled"]) + 2.0 * float(row["train/distill"])
    assert float(row["train/loss"]) == pytest.approx(total, rel=1e-4)


def test_unlabelled_images_without_a_teacher_are_a_config_problem(tiny_coco, tmp_path):
    run_dir = tmp_path / "run"
    with pytest.raises(SystemExit) as exit_:
        main(["--config", "pose_coco.yaml", "--run_dir", str(run_dir), "--data.root", str(tiny_coco),
              "--data.unlabeled", str(tmp_path), "--model.distill.temperature", "0"])
    message = str(exit_.value)
    assert "data.unlabeled: images without labels train only against a teacher" in message
    assert "model.distill.temperature: 0.0 must be > 0" in message
    assert not run_dir.exists()
