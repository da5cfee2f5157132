"""End to end: the pose demo recipe, shortened to STEPS steps on DEMO_IMAGES rendered images, learns: with a new
head (the recipe's head before 2026-12-04, at its lr then) and as shipped, from the backbone's pretrained head.

``SAPIENS2_FT_DEMO_SEED`` (default 0) sets the training seed, to measure the spread the bounds below are
calibrated on:  ``for s in 0 1 2; do SAPIENS2_FT_DEMO_SEED=$s pytest -s tests/apps/test_pose_demo.py; done``.
"""

from __future__ import annotations

import csv
import os

import pytest

from conftest import DEMO_IMAGES
from model_cards import check_demo_card
from sapiens2_ft.training.cli import main

pytestmark = pytest.mark.slow

SEED = int(os.environ.get("SAPIENS2_FT_DEMO_SEED", "0"))
# Steps and warm-up (the recipe's 25 of 200, scaled) per head: a new one learns in 50; the pretrained one only has to
# load and keep its level, which 20 steps show.
STEPS = {"new": (50, 5), "pretrained": (20, 2)}
# Measured with these settings on 2 cores (mini backbone of assets/ at 5100 steps), AP50 / AR50 / last over first
# train loss (steps 0-1 against 48-49): seed 0 0.068 / 0.188 / x0.60, seed 1 0.066 / 0.158 / x0.59, seed 2
# 0.081 / 0.178 / x0.59 (the 2700-step backbone: 0.027-0.036 / 0.099-0.119). A head that has not learned scores
# AP50 0 and AR50 0 and keeps its loss; the AP50 and AR50 bounds sit at half the lowest values. The 9100-step
# backbone shipped on 2026-12-04: seed 0 0.158 / 0.297 / x0.58 (7900 steps: 0.136 / 0.257); later ones: below.
# As shipped since 2026-12-07 (the pretrained head, the recipe's lr 1e-4, 20 steps), seeds 0, 1, 2, on the 16,400-step
# backbone: AP50 0.820 / 0.810 / 0.766, AR50 0.842 / 0.832 / 0.802, last over first train loss x1.012 / x0.974 / x1.014
# (a trained head: the loss starts low and stays, noisily); its new head (50 steps), seed 0: 0.184 / 0.337 / x0.575.
# (At lr 2e-4: 0.753-0.823 / 0.792-0.842; 13,700 steps: 0.670-0.747 / 0.743-0.792, new 0.187 / 0.327.) The bounds sit
# midway between the new head's values and the lowest pretrained ones (0.47 between 0.184 and 0.766, 0.57 between
# 0.337 and 0.802), so a head that did not load fails them; the loss bound only catches divergence.
BOUNDS = {"new": dict(AP50=0.033, AR50=0.079, loss=0.9),  # loss: the last two logged train losses over the first two
          "pretrained": dict(AP50=0.47, AR50=0.57, loss=1.1)}
NEW_HEAD = ["--model.pretraining_head", "false", "--model.optim.lr", "2.0e-3"]


@pytest.mark.parametrize("head", sorted(BOUNDS))
def test_pose_demo_lowers_loss_and_reaches_ap(head, demo_data, tmp_path):
    run_dir = tmp_path / "run"
    bounds, (steps, warmup) = BOUNDS[head], STEPS[head]
    summary = main([
        "--config", "pose_demo.yaml", "--run_dir", str(run_dir), "--seed_everything", str(SEED),
        "--data.root", str(demo_data), "--data.synthetic.num_images", str(DEMO_IMAGES),
        "--trainer.max_steps", str(steps), "--trainer.val_check_interval", str(steps),
        "--trainer.enable_progress_bar", "false", "--trainer.num_sanity_val_steps", "0",
        "--model.optim.warmup_steps", str(warmup),
        "--trainer.log_every_n_steps", "1", *(NEW_HEAD if head == "new" else []),
    ])
    with open(run_dir / "metrics.csv") as f:
        losses = [float(r["train/loss"]) for r in csv.DictReader(f) if r.get("train/loss")]
    first, last = sum(losses[:2]) / 2, sum(losses[-2:]) / 2
    metrics = summary["metrics"]
    print(f"{head} head, seed {SEED}: train loss {first:.3f} -> {last:.3f} (x{last / first:.3f}); val {metrics}")
    assert last < bounds["loss"] * first, f"train loss over the bound: {first:.3f} -> {last:.3f}"
    assert metrics["AP50"] > bounds["AP50"], metrics
    assert metrics["AR50"] > bounds["AR50"], metrics
    check_demo_card(summary)  # the export's model card holds these metrics
