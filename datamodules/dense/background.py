"""Background replacement of the upstream segmentation recipe: pixels labelled background (class 0) get a
new background, then the figure's colours are matched to it (Reinhard transfer in Lab, weighted by the mask).

Upstream (``dense/src/datasets/transforms/seg_transforms.py``, ``SegRandomBackground``) takes backgrounds
from a folder of photos (BG-20k); without a folder the procedural generator of the synthetic data is used.
The mask is hard: every non-zero label, 255 (ignore) included, keeps its pixel, with no feathering at the
figure's edges.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from datamodules.boundary.images import read_image
from datamodules.errors import DataError

BACKGROUND_SUFFIXES = (".jpg", ".jpeg", ".png")


class BackgroundSource:
    """Backgrounds of a given size: a random image of ``folder`` (resized to the height, centre-cropped to the
    width; stretched when narrower), or a procedural one when ``folder`` is None."""

    def __init__(self, folder: str | Path | None = None):
        self.files: list[Path] = []
        if folder is not None:
            path = Path(folder)
            if not path.is_dir():
                raise ValueError(f"data.augment.background_dir: folder not found: {path}")
            self.files = sorted(p for p in path.iterdir() if p.suffix.lower() in BACKGROUND_SUFFIXES)
            if not self.files:
                raise ValueError(f"data.augment.background_dir: no {'/'.join(BACKGROUND_SUFFIXES)} images in {path}")

    def __call__(self, rng: np.random.Generator, height: int, width: int) -> np.ndarray:
        """HxWx3 uint8 RGB background."""
        if not self.files:
            # Imported here: the synthetic package (its COCO writer's pycocotools) stays out of inference's imports.
            from datamodules.synthetic.background import random_background

            return (random_background(rng, height, width) * 255).astype(np.uint8)
        path = self.files[int(rng.integers(len(self.files)))]
        try:
            rgb = read_image(path)
        except DataError as err:
            raise ValueError(f"data.augment.background_dir: {err}") from None
        fitted_w = max(1, int(height * rgb.shape[1] / rgb.shape[0]))
        image = cv2.resize(rgb, (fitted_w, height))
        if fitted_w > width:
            start = (fitted_w - width) // 2
            image = image[:, start:start + width]
        if image.shape[:2] != (height, width):
            image = cv2.resize(image, (width, height))
        return image


def replace_background(image: np.ndarray, labels: np.ndarray, background: np.ndarray) -> np.ndarray:
    """``image`` where ``labels > 0``, ``background`` elsewhere; the kept pixels' Lab mean and spread are then
    moved to the background's. An image without foreground or without background pixels is returned as is."""
    keep = (labels > 0).astype(np.uint8)
    if not keep.any() or keep.all():
        return image
    composite = np.where(keep[..., None] > 0, image, background).astype(np.uint8)
    lab = cv2.cvtColor(composite, cv2.COLOR_RGB2Lab)
    bg_mean, bg_std = (v.ravel() for v in cv2.meanStdDev(lab, mask=1 - keep))
    fg_mean, fg_std = (v.ravel() for v in cv2.meanStdDev(lab, mask=keep))
    gain = bg_std / np.maximum(fg_std, 1e-6)
    moved = cv2.convertScaleAbs(lab.astype(np.float32) * gain.astype(np.float32)
                                + (bg_mean - fg_mean * gain).astype(np.float32))  # |x|, rounded, saturated
    recoloured = cv2.cvtColor(moved, cv2.COLOR_Lab2RGB)
    return np.where(keep[..., None] > 0, recoloured, composite).astype(np.uint8)
