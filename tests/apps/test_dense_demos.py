"""End to end: each dense demo recipe, shortened to STEPS[task] steps, lowers its loss and beats a baseline
computed on the same val split: the best constant prediction (seg: background everywhere; normal:
the mean normal; matting: alpha 0 everywhere, the lower SAD of the constant mattes). Pointmaps:
the loss drop only (see below). The runs start from a new head (``model.pretraining_head: false``, at the lr the recipes
had with one): learning is what they check; the shipped recipes' pretrained heads load as tested in
tests/tasks/test_pretraining_head.py, and the pose demo test runs its recipe as shipped too."""

from __future__ import annotations

import csv
import os

import pytest
import torch
import torch.nn.functional as F

from datamodules.dense_datamodule import DenseDataModule
from conftest import DEMO_IMAGES
from sapiens2_ft.tasks.matting.metric import MattingMetrics
from sapiens2_ft.tasks.normal.metric import NormalMetrics
from sapiens2_ft.tasks.seg.metric import SegmentationMetrics
from sapiens2_ft.training.cli import main

pytestmark = pytest.mark.slow

SEED = int(os.environ.get("SAPIENS2_FT_DEMO_SEED", "0"))  # the training seed (the spread over seeds: below)
PANELS = {"seg": "segmentation", "normal": "normals", "pointmap": "depth", "matting": "matting"}
MIN_LOSS_DROP = 0.85  # last logged train losses below this fraction of the first ones
# Measured with the mini backbone of assets/ at 5100 steps and these steps (seeds 0, 1, 2): seg mIoU 0.053, 0.062,
# 0.062 against 0.042 for background everywhere (train loss x0.76, x0.69, x0.72); normal 37.9, 38.4, 37.9 deg
# against 38.8 for the mean normal (x0.06, x0.07, x0.05; on the 2700-step backbone 37.5-37.8, 80 steps 36.4-37.0,
# 40 steps not better); matting SAD 6.74, 6.02, 6.54 against 7.81 for alpha 0 (x0.31, x0.34, x0.34); pointmap
# train loss x0.25, x0.38, x0.26. Pointmaps get the loss check only: in these CPU minutes the model does not
# reach the per-pixel mean pointmap of the val split (its predicted scale, hence metric Z, is far off; the full
# demo: L2 0.90 m against 0.79 m). The 9100-step backbone shipped on 2026-12-04, seed 0: seg 0.056 (x0.74), normal
# 37.1 deg (x0.05), matting SAD 6.71 (x0.32), pointmap x0.28; the 11,500-step one of 2026-12-07, seed 0: seg 0.059
# (x0.74), normal 37.3 deg (x0.06), matting SAD 6.66 (x0.31), pointmap x0.30 (on either, the spread over seeds not
# measured).
STEPS = {"seg": 40, "normal": 60, "matting": 60, "pointmap": 15}
WARMUP = 5  # the recipes' warm-up (20 of 200 steps) scaled to the shortened runs


def _val_batches(root, task):
    dm = DenseDataModule(task, root=str(root), input_size=(256, 192), batch_size=16, num_workers=0)
    dm.setup("validate")
    return list(dm.val_dataloader())


def constant_baseline(root, task) -> float:
    """The monitored metric of the best constant prediction on the val split."""
    batches = _val_batches(root, task)
    if task == "seg":
        metric = SegmentationMetrics(29)
        for b in batches:
            metric.update(torch.zeros_like(b["labels"]), b["labels"])
        return metric.compute()["mIoU"].item()
    if task == "normal":
        mean = F.normalize(sum((b["normals"] * b["mask"][:, None]).sum((0, 2, 3)) for b in batches), dim=0)
        metric = NormalMetrics()
        for b in batches:
            metric.update(mean.view(1, 3, 1, 1).expand_as(b["normals"]), b["normals"], b["mask"])
        return metric.compute()["angle_mean"].item()
    if task == "matting":
        metric = MattingMetrics()
        for b in batches:
            metric.update(torch.zeros_like(b["alpha"]), b["alpha"])
        return metric.compute()["sad"].item()
    raise ValueError(task)


def _run(task, root, run_dir, steps):
    return main([
        "--config", f"{task}_demo.yaml", "--run_dir", str(run_dir), "--data.root", str(root),
        "--seed_everything", str(SEED),
        "--data.synthetic.num_images", str(DEMO_IMAGES), "--trainer.max_steps", str(steps),
        "--trainer.val_check_interval", str(max(steps, 1)), "--trainer.enable_progress_bar", "false",
        "--trainer.num_sanity_val_steps", "0", "--model.optim.warmup_steps", str(WARMUP),
        "--trainer.log_every_n_steps", "1", "--model.pretraining_head", "false", "--model.optim.lr", "2.0e-3",
    ])


def _loss_drop(run_dir) -> tuple[float, float]:
    with open(run_dir / "metrics.csv") as f:
        losses = [float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")]
    return sum(losses[:2]) / 2, sum(losses[-2:]) / 2


@pytest.mark.parametrize("task,better", [("seg", "higher"), ("normal", "lower"), ("matting", "lower"),
                                         ("pointmap", None)])
def test_dense_demo_learns(task, better, demo_data, tmp_path):
    summary = _run(task, demo_data, tmp_path / "run", STEPS[task])
    first, last = _loss_drop(tmp_path / "run")
    print(f"{task}: train loss {first:.3f} -> {last:.3f}; val {summary['metrics']}")
    assert last < MIN_LOSS_DROP * first, f"train loss did not drop: {first:.3f} -> {last:.3f}"
    panel = PANELS[task]  # the task's image panel: in the run directory and in the (offline) wandb run
    assert {p.name.rsplit("_", 1)[0] for p in (tmp_path / "run" / "overlays").glob("*.png")} == {panel}
    assert list((tmp_path / "run" / "wandb").glob(f"offline-run-*/files/media/images/val/{panel}_*.png"))
    assert (tmp_path / "run" / "results.png").exists() and (tmp_path / "run" / "export" / "config.json").exists()
    if better is None:
        return
    key = summary["monitor"].removeprefix("val/")
    value, baseline = summary["metrics"][key], constant_baseline(demo_data, task)
    print(f"{task}: val {key} {value:.4f} vs baseline {baseline:.4f}")
    assert (value > baseline) if better == "higher" else (value < baseline), (value, baseline)
