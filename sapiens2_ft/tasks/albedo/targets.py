"""Albedo targets: ``{split}/albedo/NAME.png`` (RGB: the base colour of each surface before lighting, as the
renderer's ``albedo/`` and upstream's ``albedo/`` folders hold it) and an optional ``{split}/masks/NAME.png`` of valid
pixels (absent: every pixel is valid).

Dataset item: ``albedo`` float32 (3, H, W) in [0, 1] + ``mask`` bool (H, W). ``albedo`` is warped linearly
(``maps``) and only mirrored by a flip; a training sample whose albedo is one flat colour is left out. Trained with the camera pipeline as upstream's albedo recipe
runs it (``dense/configs/albedo/**``): scale, crop, flip and letterbox as for normals, then Gaussian noise with
chance 0.2; no colour distortion (a hue change would make the image's colours disagree with the albedo's), no
down/up-sampling, blur or solarize.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import torch

from datamodules.dense.filters import valid_pixels
from datamodules.dense.maps import VALUES
from datamodules.dense.readers import check_size, chw, read_png, valid_mask
from datamodules.dense.target_spec import Attempt, TargetSpec, raise_problems
from datamodules.errors import DataError


def paths(split_dir: Path, name: str) -> tuple[dict[str, Path], dict[str, Path]]:
    """The albedo of image ``name`` (required) and its valid-pixel mask (optional)."""
    return {"albedo": split_dir / "albedo" / f"{name}.png"}, {"mask": split_dir / "masks" / f"{name}.png"}


def load_albedo(path: Path, shape) -> np.ndarray:
    """HxWx3 float32 RGB albedo in [0, 1] from an 8-bit colour PNG."""
    image = check_size(read_png(path, cv2.IMREAD_UNCHANGED), shape, path)
    if image.ndim != 3 or image.shape[2] != 3 or image.dtype != np.uint8:
        raise DataError(f"{path}: albedo must be an 8-bit RGB image, got {image.dtype} with shape {image.shape}")
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB).astype(np.float32) / 255.0


def load(files: dict[str, Path], shape, num_classes: int, attempt: Attempt = raise_problems) -> dict:
    """``albedo`` and ``mask`` of one image."""
    return {"albedo": attempt("albedo", lambda: load_albedo(files["albedo"], shape)),
            "mask": valid_mask(files, shape, attempt)}


def to_item(sample: dict, canonical_focal: float) -> dict:
    """``albedo`` (3, H, W) and the bool ``mask``."""
    return {"albedo": chw(np.clip(sample["albedo"], 0.0, 1.0).astype(np.float32)),
            "mask": torch.from_numpy(sample["mask"].astype(bool))}


def flat_colour(item: dict, min_albedo_std: float) -> str | None:
    """Why a sample whose valid pixels' albedo varies less than ``min_albedo_std`` in every channel is left out
    (upstream's albedo dataset skips them)."""
    mask = valid_pixels(item)
    if mask is None:
        return None
    spread = float(np.asarray(item["albedo"])[:, mask].std(axis=1).max())
    if spread < min_albedo_std:
        return f"albedo std {spread:.3g} < min_albedo_std {min_albedo_std}"
    return None


TARGETS = TargetSpec("albedo", paths, load, to_item, pipeline="camera", maps={"albedo": VALUES},
                     augment=dict(photometric_prob=0.0, downup_prob=0.0, blur_prob=0.0, noise_prob=0.2,
                                  solarize_prob=0.0),
                     checks={"min_albedo_std": flat_colour})
