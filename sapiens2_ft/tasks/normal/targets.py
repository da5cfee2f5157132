"""Surface-normal targets: ``{split}/normals/NAME.npy`` (HxWx3 camera-space unit normals: x right, y down,
z forward) and an optional ``{split}/masks/NAME.png`` of valid pixels (absent: every pixel is valid).

Dataset item: ``normals`` float32 (3, H, W) + ``mask`` bool (H, W). Trained with the upstream camera pipeline.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from datamodules.dense.maps import UNIT_VECTORS
from datamodules.dense.readers import check_size, chw, read_npy, valid_mask
from datamodules.dense.target_spec import Attempt, TargetSpec, raise_problems
from datamodules.errors import DataError

NORMAL_TOLERANCE = 0.1  # |‖n‖ - 1| allowed on the mask


def paths(split_dir: Path, name: str) -> tuple[dict[str, Path], dict[str, Path]]:
    """The normal map of image ``name`` (required) and its mask (optional)."""
    return {"normals": split_dir / "normals" / f"{name}.npy"}, {"mask": split_dir / "masks" / f"{name}.png"}


def load_normals(path: Path, shape, mask: np.ndarray) -> np.ndarray:
    """HxWx3 float32 normals: finite everywhere, unit length (within 0.1) on ``mask``."""
    normals = check_size(read_npy(path), shape, path)
    if normals.ndim != 3 or normals.shape[2] != 3:
        raise DataError(f"{path}: normals must be HxWx3, got shape {normals.shape}")
    normals = normals.astype(np.float32)
    if not np.isfinite(normals).all():
        raise DataError(f"{path}: normals contain NaN or inf")
    norm = np.linalg.norm(normals[mask], axis=-1)
    if norm.size and np.abs(norm - 1).max() > NORMAL_TOLERANCE:
        raise DataError(f"{path}: normals on the mask are not unit length (norm in [{norm.min():.3g}, "
                        f"{norm.max():.3g}])")
    return normals


def load(files: dict[str, Path], shape, num_classes: int, attempt: Attempt = raise_problems) -> dict:
    """``mask`` and ``normals`` (unit length on the mask) of one image."""
    mask = valid_mask(files, shape, attempt)
    return {"mask": mask, "normals": attempt("normals", lambda: load_normals(files["normals"], shape, mask))}


def to_item(sample: dict, canonical_focal: float) -> dict:
    """``normals`` (3, H, W) and the bool ``mask``."""
    return {"normals": chw(sample["normals"].astype(np.float32)), "mask": torch.from_numpy(sample["mask"])}


TARGETS = TargetSpec("normal", paths, load, to_item, pipeline="camera", maps={"normals": UNIT_VECTORS})
