"""Matting targets: ``{split}/alpha/NAME.png`` (uint8 matte) and an optional ``{split}/foreground/NAME.png``
(RGB foreground colours).

Dataset item: ``alpha`` (1, H, W) + ``foreground`` (3, H, W) in [0, 1] (zeros without a foreground file) +
``has_foreground`` bool. Trained with the generic pipeline (upstream has no matting training code).
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import torch

from datamodules.dense.maps import COLOURS, VALUES
from datamodules.dense.readers import check_size, chw, read_png
from datamodules.dense.target_spec import Attempt, TargetSpec, raise_problems


def paths(split_dir: Path, name: str) -> tuple[dict[str, Path], dict[str, Path]]:
    """The matte of image ``name`` (required) and its foreground colours (optional)."""
    return {"alpha": split_dir / "alpha" / f"{name}.png"}, {"foreground": split_dir / "foreground" / f"{name}.png"}


def load_alpha(path: Path, shape) -> np.ndarray:
    """HxW float32 matte in [0, 1]."""
    alpha = check_size(read_png(path, cv2.IMREAD_GRAYSCALE), shape, path)
    return alpha.astype(np.float32) / 255.0


def load_foreground(path: Path, shape) -> np.ndarray:
    """HxWx3 float32 RGB foreground in [0, 1]."""
    bgr = check_size(read_png(path, cv2.IMREAD_COLOR), shape, path)
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB).astype(np.float32) / 255.0


def load(files: dict[str, Path], shape, num_classes: int, attempt: Attempt = raise_problems) -> dict:
    """``alpha`` and, with its file, ``foreground`` of one image."""
    out = {"alpha": attempt("alpha", lambda: load_alpha(files["alpha"], shape))}
    if "foreground" in files:
        out["foreground"] = attempt("foreground", lambda: load_foreground(files["foreground"], shape))
    return out


def to_item(sample: dict, canonical_focal: float) -> dict:
    """``alpha``, ``foreground`` (zeros without one) and ``has_foreground``."""
    alpha = np.clip(sample["alpha"], 0, 1).astype(np.float32)
    h, w = alpha.shape
    fg = sample.get("foreground")
    return {"alpha": torch.from_numpy(alpha[None]),
            "foreground": chw(np.clip(fg, 0, 1) if fg is not None else np.zeros((h, w, 3), np.float32)),
            "has_foreground": torch.tensor(fg is not None)}


# No blur: it mixes the background into the pixels whose foreground colour is the target, breaking
# image = alpha x foreground + (1 - alpha) x background (the composition term's premise; colour changes keep it).
TARGETS = TargetSpec("matting", paths, load, to_item, pipeline="generic",
                     maps={"alpha": VALUES, "foreground": COLOURS}, augment={"blur_prob": 0.0})
