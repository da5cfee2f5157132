"""End to end: the pose demo recipe, as shipped, learns on freshly rendered synthetic figures."""

from __future__ import annotations

import csv

from sapiens2_ft.training.cli import main

# Calibrated on this 2-core CPU with the shipped config (250 steps from the tiny pretrain-only
# backbone in assets/, seed 0, 300 synthetic images) measured in three runs: train loss 7.28-7.30 ->
# 6.23 (first and last three logged values), val AP 0.0014-0.0029, AR50 0.099-0.109 (the spread
# came from unseeded photometric augmentation, now seeded). A freshly initialised head scores AP 0
# and AR50 0; the thresholds sit below the lowest measured values.
MIN_AP = 0.0005
MIN_AR50 = 0.04


def test_pose_demo_lowers_loss_and_reaches_ap(tmp_path):
    run_dir = tmp_path / "run"
    summary = main([
        "--config", "pose_demo.yaml", "--run_dir", str(run_dir),
        "--data.root", str(tmp_path / "synthetic"), "--data.synthetic.num_images", "300",
        "--trainer.enable_progress_bar", "false",
    ])
    with open(run_dir / "metrics.csv") as f:
        losses = [float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")]
    first, last = sum(losses[:3]) / 3, sum(losses[-3:]) / 3
    print(f"train loss {first:.3f} -> {last:.3f}; val {summary['metrics']}")
    assert last < 0.92 * first, f"train loss did not drop: {first:.3f} -> {last:.3f}"
    assert summary["metrics"]["AP"] > MIN_AP, summary["metrics"]
    assert summary["metrics"]["AR50"] > MIN_AR50, summary["metrics"]
