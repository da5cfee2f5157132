"""Learning tests: each task, trained from a random backbone on 8 synthetic images and evaluated on the same
images, fits them almost perfectly. A bug that breaks learning (a loss or decode with the wrong sign or scale,
targets misaligned with the image) fails these, where a loss-went-down check passes.

Geometric and photometric augmentation is off, except horizontal flips. ``LEARNING_FAULT`` injects a fault into the
training data only, to see a test fail. Measured (issue 12's note): the shift fails pose, seg, normal and matting
(pointmap's bound only separates learning from not learning); the swap-less flip fails pose (its validation flip
test maps heatmaps back with the real pairs), while seg and normals memorise both versions of 8 images, so the
dense flip rules are tested by the flip-equivariance tests of ``tests/data/test_dense_data.py`` instead:

    LEARNING_FAULT=shift pytest tests/tasks/test_learning.py   # training images rolled 4 px right of their targets
    LEARNING_FAULT=flip pytest tests/tasks/test_learning.py    # flips mirror pixels only: no left/right swap, no sign
"""

from __future__ import annotations

import os

import numpy as np
import pytest
import torch

from datamodules.dense import augment as dense_augment, transforms as dense_transforms
from datamodules.dense_dataset import DenseDataset
from datamodules.pose_dataset import TopdownPoseDataset
from datamodules.synthetic import generate_dataset
from sapiens2_ft.tasks.dense_data import DenseTaskData
from sapiens2_ft.tasks.pointmap.loss import masked_l1
from sapiens2_ft.training.cli import main

pytestmark = pytest.mark.slow  # about 2 minutes: the fast tier keeps the 2-4-step smoke runs of every task

FAULT = os.environ.get("LEARNING_FAULT")  # None, "shift" or "flip"
SHIFT_PX = 4

# Bounds: issue 12's targets (matting: see its test). Measured, seed 0: pose AP 0.938 (seeds 1, 2: 0.953, 0.961;
# at 256x192 and 160 steps 0.975, for a third more CPU), seg pixel accuracy 0.974, normal 8.3 deg, matting MSE
# 0.043, pointmap canonical L1 0.317 against the per-pixel mean's 2.36.
POSE_MIN_AP = 0.9
SEG_MIN_PIXEL_ACC = 0.95
NORMAL_MAX_ANGLE = 10.0
MATTING_MAX_MSE = 0.05  # not the 0.01: see test_matting_fits_its_training_set
POINTMAP_MAX_L1_FRACTION = 0.2  # of the per-pixel-mean prediction's canonical L1 on the same images


@pytest.fixture(scope="module")
def eight_images(tmp_path_factory):
    """10 rendered images: 8 to train and evaluate on (the 2 val images are not used)."""
    root = tmp_path_factory.mktemp("learning") / "synthetic"
    generate_dataset(root, 10, seed=3, val_fraction=0.2, progress=False)
    return root


@pytest.fixture(autouse=True)
def fault(monkeypatch):
    """Apply ``LEARNING_FAULT`` to training items only (validation stays right)."""
    if FAULT == "shift":
        def rolled(item_fn):
            def item(self, *args, **kwargs):
                out = item_fn(self, *args, **kwargs)
                if self.augment:  # a training set
                    out = {**out, "image": torch.roll(out["image"], SHIFT_PX, dims=-1)}
                return out
            return item
        monkeypatch.setattr(TopdownPoseDataset, "item", rolled(TopdownPoseDataset.item))
        monkeypatch.setattr(DenseDataset, "item", rolled(DenseDataset.item))
    elif FAULT == "flip":
        def mirror_only(sample, flip_table=None):
            return {k: np.ascontiguousarray(v[:, ::-1]) if isinstance(v, np.ndarray) and v.ndim >= 2 and k != "K"
                    else v for k, v in sample.items()}
        for module in (dense_augment, dense_transforms):  # the upstream pipelines and the generic one
            monkeypatch.setattr(module, "flip_sample", mirror_only)
        init = TopdownPoseDataset.__init__

        def no_swap(self, *args, **kwargs):
            init(self, *args, **kwargs)
            if self.augment:
                self.flip_indices = np.arange(len(self.flip_indices))
        monkeypatch.setattr(TopdownPoseDataset, "__init__", no_swap)
    elif FAULT is not None:
        raise ValueError(f"LEARNING_FAULT={FAULT!r}: use shift or flip")


COMMON = ["--trainer.accelerator", "cpu", "--trainer.devices", "1", "--trainer.enable_progress_bar", "false",
          "--trainer.check_val_every_n_epoch", "null", "--trainer.log_every_n_steps", "10",
          "--tracking.logger", "csv", "--tracking.num_panel_images", "0", "--export", "false", "--trainer.num_sanity_val_steps", "0",
          "--data.num_workers", "0", "--data.synthetic", "null", "--model.optim.weight_decay", "0", "--model.optim.warmup_steps", "10"]


def overfit(config: str, root, run_dir, steps: int, lr: float, *extra: str) -> dict:
    """Train the ``tiny`` preset from random weights for ``steps`` steps on the training split and validate on the
    same images: the final metrics."""
    summary = main(["--config", config, "--run_dir", str(run_dir), "--model.pretrained", "null", "--model.size", "tiny",
                    "--model.pretraining_head", "false", "--data.root", str(root), "--trainer.max_steps", str(steps),
                    "--trainer.val_check_interval", str(steps), "--model.optim.lr", str(lr), *COMMON, *extra])
    print(config, summary["metrics"])
    return summary["metrics"]


def test_pose_fits_its_training_set(eight_images, tmp_path):
    metrics = overfit("pose_demo.yaml", eight_images, tmp_path / "run", 200, 3e-3,
                      "--data.val_ann", "annotations/train.json", "--data.val_images", "train/images",
                      "--data.batch_size", "8", "--data.input_size", "[192, 144]", "--data.augment.half_body_prob", "0",
                      "--data.augment.shift_prob", "0", "--data.augment.scale_prob", "0",
                      "--data.augment.rotate_prob", "0", "--data.augment.photometric_prob", "0",
                      "--data.augment.blur_prob", "0", "--data.augment.median_blur_prob", "0",
                      "--data.augment.dropout_prob", "0")
    assert metrics["AP"] >= POSE_MIN_AP, metrics


DENSE_STILL = ["--data.val_split", "train", "--data.batch_size", "8", "--data.input_size", "[128, 96]", "--data.augment.pipeline", "generic",
               "--data.augment.scale_range", "[1.0, 1.0]", "--data.augment.photometric_prob", "0",
               "--data.augment.blur_prob", "0", "--data.augment.dropout_prob", "0"]


def test_seg_fits_its_training_set(eight_images, tmp_path):
    metrics = overfit("seg_demo.yaml", eight_images, tmp_path / "run", 150, 5e-3, *DENSE_STILL,
                      "--model.class_weights", str([1.0] * 29))  # uniform: pixel accuracy counts background
    assert metrics["aAcc"] >= SEG_MIN_PIXEL_ACC, metrics


def test_normal_fits_its_training_set(eight_images, tmp_path):
    metrics = overfit("normal_demo.yaml", eight_images, tmp_path / "run", 200, 5e-3,
                      *DENSE_STILL)
    assert metrics["angle_mean"] <= NORMAL_MAX_ANGLE, metrics


def test_matting_fits_its_training_set(eight_images, tmp_path):
    """The head predicts at 1/4 of the input, resized bilinearly: at 128x96 the ground truth itself, area-reduced
    to 1/4 and resized back, has MSE 0.017 (0.008 at 256x192), so the issue's 0.01 is below what this test's
    resolution allows. Measured: 0.038 after 200 steps; alpha 0 everywhere scores 0.217."""
    metrics = overfit("matting_demo.yaml", eight_images, tmp_path / "run", 150, 5e-3,
                      *DENSE_STILL)
    assert metrics["mse"] <= MATTING_MAX_MSE, metrics


def test_pointmap_fits_its_training_set(eight_images, tmp_path):
    metrics = overfit("pointmap_demo.yaml", eight_images, tmp_path / "run", 120, 5e-3,
                      *DENSE_STILL)
    baseline = per_pixel_mean_l1(eight_images)
    assert metrics["l1"] <= POINTMAP_MAX_L1_FRACTION * baseline, (metrics, baseline)


def per_pixel_mean_l1(root) -> float:
    """Canonical L1 (the loss's ``l1`` term: summed over X, Y, Z, mean over valid pixels) of the training images'
    per-pixel mean canonical pointmap, at the validation resize of the test."""
    dm = DenseTaskData("pointmap", root=str(root), val_split="train", input_size=(128, 96), batch_size=8,
                         num_workers=0)
    dm.setup("validate")
    (batch,) = list(dm.val_dataloader())  # the 8 images in one batch, as in validation
    mask = batch["mask"].float()[:, None]
    mean = (batch["pointmap"] * mask).sum(0, keepdim=True) / mask.sum(0, keepdim=True).clamp_min(1)
    return masked_l1(mean.expand_as(batch["pointmap"]), batch["pointmap"], mask).item()
