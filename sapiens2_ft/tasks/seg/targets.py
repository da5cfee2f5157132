"""Body-part segmentation targets: ``{split}/labels/NAME.png``, single-channel uint8 class ids (255 = ignore).

Dataset item: ``labels`` int64 (H, W). Trained with the upstream segmentation pipeline (stretched to the input).
A training sample with less than ``data.filter.min_foreground`` of its pixels on a person is left out.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import torch

from datamodules.dense.maps import CLASS_IDS
from datamodules.dense.readers import check_size, read_png
from datamodules.dense.target_spec import Attempt, TargetSpec, raise_problems
from datamodules.errors import DataError

IGNORE_INDEX = 255


def paths(split_dir: Path, name: str) -> tuple[dict[str, Path], dict[str, Path]]:
    """The label map of image ``name`` (required)."""
    return {"labels": split_dir / "labels" / f"{name}.png"}, {}


def load_labels(path: Path, shape, num_classes: int) -> np.ndarray:
    """HxW uint8 class ids; values outside ``[0, num_classes)`` other than 255 are an error."""
    labels = check_size(read_png(path, cv2.IMREAD_UNCHANGED), shape, path)
    if labels.ndim != 2 or labels.dtype != np.uint8:
        raise DataError(f"{path}: labels must be a single-channel uint8 PNG, got {labels.dtype} {labels.shape}")
    bad = np.unique(labels[(labels >= num_classes) & (labels != IGNORE_INDEX)])
    if bad.size:
        raise DataError(f"{path}: label values {bad[:10].tolist()} outside the {num_classes}-class set "
                        f"(ignore index {IGNORE_INDEX})")
    return labels


def load(files: dict[str, Path], shape, num_classes: int, attempt: Attempt = raise_problems) -> dict:
    """``labels`` of one image, checked against the class set."""
    return {"labels": attempt("labels", lambda: load_labels(files["labels"], shape, num_classes))}


def to_item(sample: dict, canonical_focal: float) -> dict:
    """``labels`` as int64 class ids."""
    return {"labels": torch.from_numpy(sample["labels"].astype(np.int64))}


def too_little_foreground(item: dict, min_foreground: float) -> str | None:
    """Why a sample whose share of person pixels (a class other than 0, not ignored) is below ``min_foreground``
    is left out."""
    labels = np.asarray(item["labels"])
    foreground = np.count_nonzero((labels > 0) & (labels != IGNORE_INDEX)) / labels.size
    if foreground < min_foreground:
        return f"foreground {foreground:.2%} < min_foreground {min_foreground}"
    return None


TARGETS = TargetSpec("seg", paths, load, to_item, pipeline="seg", maps={"labels": CLASS_IDS},
                     checks={"min_foreground": too_little_foreground})
