"""End to end: ``albedo_demo.yaml`` as shipped (the demo backbone with a new albedo head starting at mid-grey: none
was pretrained with it), shortened to STEPS steps on DEMO_IMAGES rendered images. Its validation before the first
step (``validate_first``) is the start; the end must beat it on PSNR and MAE and beat the constant mean-albedo
prediction on the same val split by a calibrated margin (PSNR). SSIM is not asserted: it falls below the start in the
first steps and is still below it after the demo's 200 (docs/dense.md, "Demos").

``SAPIENS2_FT_DEMO_SEED`` (default 0) sets the training seed, to measure the spread the bound is calibrated on:
``for s in 0 1 2; do SAPIENS2_FT_DEMO_SEED=$s pytest -s tests/apps/test_albedo_demo.py; done``.
"""

from __future__ import annotations

import os

import pytest

from conftest import DEMO_IMAGES
from sapiens2_ft.tasks.albedo.metric import AlbedoMetrics
from sapiens2_ft.tasks.dense_data import DenseTaskData
from sapiens2_ft.training.cli import main
from test_dense_demos import MAX_LOSS_RISE, _losses

pytestmark = pytest.mark.slow

SEED = int(os.environ.get("SAPIENS2_FT_DEMO_SEED", "0"))
STEPS, WARMUP = 12, 1  # the recipe's warm-up (20 of 200 steps) scaled to the shortened run
# Measured as shipped, 12 steps, seeds 0 / 1 / 2, on the first VAL_IMAGES val images: PSNR 11.72 dB at the start
# (the new head at mid-grey, every seed) -> 12.27 / 12.61 / 12.25, against 11.81 for the constant mean albedo (MAE
# 0.2252 -> 0.2044 / 0.1941 / 0.2014, constant 0.2242). The bound sits midway between the constant and the worst
# seed; a head that does not learn stays at the start and fails it. 75-90 s at load 7 on 2 cores (8 steps: 11.89 dB,
# too close to the constant).
BOUND = 12.0
VAL_IMAGES = 32  # the first 32 of the 60 val images (batch 8), at the start, the end and for the constant


def constant_albedo(root, images: int | None = None) -> dict[str, float]:
    """The metrics of the mean albedo of the valid pixels of the val split (its first ``images``), predicted
    everywhere."""
    dm = DenseTaskData("albedo", root=str(root), input_size=(256, 192), batch_size=8, num_workers=0)
    dm.setup("validate")
    batches = list(dm.val_dataloader())[:None if images is None else images // 8]
    mask = [b["mask"][:, None].float() for b in batches]
    mean = sum((b["albedo"] * m).sum((0, 2, 3)) for b, m in zip(batches, mask)) / sum(m.sum() for m in mask)
    metric = AlbedoMetrics()
    for b in batches:
        metric.update(mean.view(1, 3, 1, 1).expand_as(b["albedo"]), b["albedo"], b["mask"])
    return {k: v.item() for k, v in metric.compute().items()}


def test_albedo_demo_as_shipped_learns_and_beats_the_constant_mean_albedo(demo_data, tmp_path):
    summary = main([
        "--config", "albedo_demo.yaml", "--run_dir", str(tmp_path / "run"), "--data.root", str(demo_data),
        "--seed_everything", str(SEED), "--data.synthetic.num_images", str(DEMO_IMAGES),
        "--trainer.max_steps", str(STEPS), "--trainer.val_check_interval", str(STEPS),
        "--trainer.enable_progress_bar", "false", "--model.optim.warmup_steps", str(WARMUP),
        "--trainer.log_every_n_steps", "1", "--trainer.limit_val_batches", str(VAL_IMAGES // 8),
    ])
    first, last = _losses(tmp_path / "run")
    start, end, constant = summary["start_metrics"], summary["metrics"], constant_albedo(demo_data, VAL_IMAGES)
    print(f"albedo, seed {SEED}: train loss {first:.3f} -> {last:.3f}; val start -> end: PSNR {start['psnr']:.2f} -> "
          f"{end['psnr']:.2f}, SSIM {start['ssim']:.3f} -> {end['ssim']:.3f}, MAE {start['mae']:.4f} -> "
          f"{end['mae']:.4f}; constant mean albedo: PSNR {constant['psnr']:.2f}, SSIM {constant['ssim']:.3f}, MAE "
          f"{constant['mae']:.4f}")
    assert last < MAX_LOSS_RISE * first, f"train loss diverged: {first:.3f} -> {last:.3f}"
    assert {p.name.rsplit("_", 1)[0] for p in (tmp_path / "run" / "overlays").glob("*.png")} == {"albedo"}
    assert end["psnr"] > start["psnr"] and end["mae"] < start["mae"], (start, end)
    assert BOUND > constant["psnr"], f"the bound {BOUND} is no better than {constant['psnr']}"
    assert end["psnr"] > BOUND, (end, BOUND, constant)
