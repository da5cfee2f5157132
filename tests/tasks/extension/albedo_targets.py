"""Albedo targets (the toy task of tests/tasks/test_extension.py): ``{split}/albedo/NAME.png`` (uint8 grey
reflectance) and an optional ``{split}/masks/NAME.png`` (0/255 valid pixels; default: every pixel).

Dataset item: ``albedo`` (1, H, W) float32 in [0, 1] + ``mask`` bool (H, W). ``albedo`` is a map kind of its own:
warped linearly (``maps``), only mirrored by a flip. Trained with the generic pipeline.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import torch

from datamodules.dense.targets.readers import check_size, read_png, valid_mask
from datamodules.dense.targets.spec import Attempt, TargetSpec, raise_problems


def paths(split_dir: Path, name: str) -> tuple[dict[str, Path], dict[str, Path]]:
    """The albedo of image ``name`` (required) and its valid-pixel mask (optional)."""
    return {"albedo": split_dir / "albedo" / f"{name}.png"}, {"mask": split_dir / "masks" / f"{name}.png"}


def load_albedo(path: Path, shape) -> np.ndarray:
    """HxW float32 albedo in [0, 1]."""
    return check_size(read_png(path, cv2.IMREAD_GRAYSCALE), shape, path).astype(np.float32) / 255.0


def load(files: dict[str, Path], shape, num_classes: int, attempt: Attempt = raise_problems) -> dict:
    """``albedo`` and ``mask`` of one image."""
    return {"albedo": attempt("albedo", lambda: load_albedo(files["albedo"], shape)),
            "mask": valid_mask(files, shape, attempt)}


def to_item(sample: dict, canonical_focal: float) -> dict:
    """``albedo`` (1, H, W) and ``mask`` (H, W)."""
    albedo = np.clip(sample["albedo"], 0, 1).astype(np.float32)
    return {"albedo": torch.from_numpy(albedo[None]), "mask": torch.from_numpy(sample["mask"].astype(bool))}


ALBEDO = TargetSpec("albedo", paths, load, to_item, pipeline="generic", maps={"albedo": "linear"})
