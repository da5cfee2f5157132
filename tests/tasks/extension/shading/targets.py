"""Shading targets (the toy task of tests/tasks/test_extension.py): ``{split}/shading/NAME.png`` (uint8 grey
shading) and an optional ``{split}/masks/NAME.png`` (0/255 valid pixels; default: every pixel).

Dataset item: ``shading`` (1, H, W) float32 in [0, 1] + ``mask`` bool (H, W). ``shading`` is a map kind of its own:
warped linearly (``maps``: ``VALUES``), only mirrored by a flip. Trained with the generic pipeline.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import torch

from datamodules.dense.maps import VALUES
from datamodules.dense.readers import check_size, read_png, valid_mask
from datamodules.dense.target_spec import Attempt, TargetSpec, raise_problems


def paths(split_dir: Path, name: str) -> tuple[dict[str, Path], dict[str, Path]]:
    """The shading of image ``name`` (required) and its valid-pixel mask (optional)."""
    return {"shading": split_dir / "shading" / f"{name}.png"}, {"mask": split_dir / "masks" / f"{name}.png"}


def load_shading(path: Path, shape) -> np.ndarray:
    """HxW float32 shading in [0, 1]."""
    return check_size(read_png(path, cv2.IMREAD_GRAYSCALE), shape, path).astype(np.float32) / 255.0


def load(files: dict[str, Path], shape, num_classes: int, attempt: Attempt = raise_problems) -> dict:
    """``shading`` and ``mask`` of one image."""
    return {"shading": attempt("shading", lambda: load_shading(files["shading"], shape)),
            "mask": valid_mask(files, shape, attempt)}


def to_item(sample: dict, canonical_focal: float) -> dict:
    """``shading`` (1, H, W) and ``mask`` (H, W)."""
    shading = np.clip(sample["shading"], 0, 1).astype(np.float32)
    return {"shading": torch.from_numpy(shading[None]), "mask": torch.from_numpy(sample["mask"].astype(bool))}


TARGETS = TargetSpec("shading", paths, load, to_item, pipeline="generic", maps={"shading": VALUES})
