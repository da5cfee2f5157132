"""Dense-task files: list a split's samples and load / check each target.

Layout (every path relative to ``root``; files matched by stem ``NAME``)::

    root/{split}/images/NAME.png|jpg|jpeg
    root/{split}/labels/NAME.png        uint8 class ids, 255 = ignore                  (seg)
    root/{split}/normals/NAME.npy       HxWx3 float camera-space unit normals          (normal)
    root/{split}/masks/NAME.png         0/255 valid-pixel mask                         (normal, pointmap;
                                        default when absent: every pixel valid)
    root/{split}/depth/NAME.npy         HxW z-depth  + intrinsics/NAME.txt (3x3 K)     (pointmap)
      or root/{split}/pointmaps/NAME.npy  HxWx3 camera XYZ (+ optional intrinsics/NAME.txt)
    root/{split}/alpha/NAME.png         uint8 matte  + optional foreground/NAME.png RGB (matting)

Camera convention (as the synthetic generator): OpenCV pinhole, x right, y down, z forward;
pixel (row i, col j) has its centre at (u=j, v=i). Every problem raises :class:`DataError`
naming the file.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import cv2
import numpy as np

from datamodules.coco_keypoints import DataError

TASKS = ("seg", "normal", "pointmap", "matting")
IGNORE_INDEX = 255
IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")
NORMAL_TOLERANCE = 0.1  # |‖n‖ - 1| allowed on the mask


@dataclass(frozen=True)
class DenseSample:
    """One image and the target files of one task (``files``: kind -> path; optional kinds may be absent)."""

    name: str
    image: Path
    files: dict[str, Path] = field(default_factory=dict)


def target_paths(task: str, split_dir: Path, name: str) -> tuple[dict[str, Path], dict[str, Path]]:
    """(required, optional) target paths of one sample."""
    def p(folder: str, suffix: str) -> Path:
        return split_dir / folder / f"{name}{suffix}"

    if task == "seg":
        return {"labels": p("labels", ".png")}, {}
    if task == "normal":
        return {"normals": p("normals", ".npy")}, {"mask": p("masks", ".png")}
    if task == "pointmap":
        optional = {"mask": p("masks", ".png")}
        if p("pointmaps", ".npy").exists() and not p("depth", ".npy").exists():
            return {"pointmap": p("pointmaps", ".npy")}, {**optional, "intrinsics": p("intrinsics", ".txt")}
        return {"depth": p("depth", ".npy"), "intrinsics": p("intrinsics", ".txt")}, optional
    if task == "matting":
        return {"alpha": p("alpha", ".png")}, {"foreground": p("foreground", ".png")}
    raise ValueError(f"dense_files.py: unknown task {task!r}; expected one of {TASKS}")


def list_samples(root, split: str, task: str,
                 on_bad_sample: Literal["error", "skip"] = "error") -> tuple[list[DenseSample], Counter]:
    """Samples of ``root/split`` for ``task``, sorted by name, plus a Counter of skipped reasons.

    An image without a required target file raises DataError (``on_bad_sample="error"``) or is skipped.
    """
    if task not in TASKS:
        raise ValueError(f"dense_files.py: unknown task {task!r}; expected one of {TASKS}")
    split_dir = Path(root) / split
    image_dir = split_dir / "images"
    if not image_dir.is_dir():
        raise DataError(f"image folder not found: {image_dir}")
    images = sorted(p for p in image_dir.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
    names = [p.stem for p in images]
    duplicated = {n for n in names if names.count(n) > 1}
    if duplicated:
        raise DataError(f"{image_dir}: several images share the stem(s) {sorted(duplicated)[:5]}")
    samples, skipped = [], Counter()
    for image in images:
        required, optional = target_paths(task, split_dir, image.stem)
        missing = [path for path in required.values() if not path.is_file()]
        if missing:
            if on_bad_sample == "error":
                raise DataError(f"{image}: target file not found: {missing[0]}")
            skipped["missing target file"] += 1
            continue
        files = {**required, **{k: v for k, v in optional.items() if v.is_file()}}
        samples.append(DenseSample(image.stem, image, files))
    if not samples:
        raise DataError(f"{image_dir}: no usable images for task {task!r} (skipped: {dict(skipped)})")
    return samples, skipped


def _check_size(array: np.ndarray, shape: tuple[int, int], path: Path) -> np.ndarray:
    if array.shape[:2] != tuple(shape):
        raise DataError(f"{path}: size {array.shape[1]}x{array.shape[0]} (WxH) differs from its image "
                        f"{shape[1]}x{shape[0]}")
    return array


def _read_png(path: Path, flags: int) -> np.ndarray:
    image = cv2.imread(str(path), flags)
    if image is None:
        raise DataError(f"cannot read {path} (missing or not an image)")
    return image


def _read_npy(path: Path) -> np.ndarray:
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError) as err:
        raise DataError(f"cannot read {path} ({type(err).__name__}: {err})") from err


def load_labels(path: Path, shape, num_classes: int) -> np.ndarray:
    """HxW uint8 class ids; values outside ``[0, num_classes)`` other than 255 are an error."""
    labels = _check_size(_read_png(path, cv2.IMREAD_UNCHANGED), shape, path)
    if labels.ndim != 2 or labels.dtype != np.uint8:
        raise DataError(f"{path}: labels must be a single-channel uint8 PNG, got {labels.dtype} {labels.shape}")
    bad = np.unique(labels[(labels >= num_classes) & (labels != IGNORE_INDEX)])
    if bad.size:
        raise DataError(f"{path}: label values {bad[:10].tolist()} outside the {num_classes}-class set "
                        f"(ignore index {IGNORE_INDEX})")
    return labels


def load_mask(path: Path | None, shape) -> np.ndarray:
    """HxW bool valid-pixel mask (> 127); all True when ``path`` is None."""
    if path is None:
        return np.ones(shape, dtype=bool)
    mask = _check_size(_read_png(path, cv2.IMREAD_GRAYSCALE), shape, path)
    return mask > 127


def load_normals(path: Path, shape, mask: np.ndarray) -> np.ndarray:
    """HxWx3 float32 normals: finite everywhere, unit length (within 0.1) on ``mask``."""
    normals = _check_size(_read_npy(path), shape, path)
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


def load_depth(path: Path, shape, mask: np.ndarray) -> np.ndarray:
    """HxW float32 z-depth, finite and > 0 on ``mask``."""
    depth = _check_size(_read_npy(path), shape, path)
    if depth.ndim == 3 and depth.shape[2] == 1:
        depth = depth[..., 0]
    if depth.ndim != 2:
        raise DataError(f"{path}: depth must be HxW, got shape {depth.shape}")
    depth = depth.astype(np.float32)
    on = depth[mask]
    if not np.isfinite(on).all() or (on <= 0).any():
        raise DataError(f"{path}: depth must be finite and > 0 on the valid mask "
                        f"({int((~np.isfinite(on) | (on <= 0)).sum())} bad pixels)")
    return depth


def load_pointmap(path: Path, shape, mask: np.ndarray) -> np.ndarray:
    """HxWx3 float32 camera XYZ, finite with Z > 0 on ``mask``."""
    xyz = _check_size(_read_npy(path), shape, path)
    if xyz.ndim != 3 or xyz.shape[2] != 3:
        raise DataError(f"{path}: pointmap must be HxWx3, got shape {xyz.shape}")
    xyz = xyz.astype(np.float32)
    on = xyz[mask]
    if not np.isfinite(on).all() or (on[:, 2] <= 0).any():
        raise DataError(f"{path}: pointmap must be finite with Z > 0 on the valid mask")
    return xyz


def load_intrinsics(path: Path) -> np.ndarray:
    """3x3 float32 K from a whitespace text file; focal lengths must be positive."""
    try:
        K = np.loadtxt(path, dtype=np.float64, ndmin=2)
    except (OSError, ValueError) as err:
        raise DataError(f"cannot read intrinsics {path} ({type(err).__name__}: {err})") from err
    if K.shape != (3, 3):
        raise DataError(f"{path}: intrinsics must be 3x3, got {K.shape[0]}x{K.shape[1]}")
    if not np.isfinite(K).all() or K[0, 0] <= 0 or K[1, 1] <= 0:
        raise DataError(f"{path}: intrinsics need finite values and positive focal lengths (fx={K[0, 0]}, "
                        f"fy={K[1, 1]})")
    return K.astype(np.float32)


def fit_intrinsics(xyz: np.ndarray, mask: np.ndarray, path: Path) -> np.ndarray:
    """Least-squares pinhole K (fx, fy, cx, cy) of a pointmap given without intrinsics."""
    rows, cols = np.nonzero(mask)
    if rows.size < 2:
        raise DataError(f"{path}: no intrinsics file and too few valid points to estimate them")
    p = xyz[rows, cols].astype(np.float64)
    K = np.eye(3)
    for axis, pixels in ((0, cols), (1, rows)):
        a = np.stack([p[:, axis] / p[:, 2], np.ones(len(p))], axis=1)
        (focal, centre), *_ = np.linalg.lstsq(a, pixels.astype(np.float64), rcond=None)
        if not focal > 0:
            raise DataError(f"{path}: no intrinsics file and the pointmap gives no positive focal length")
        K[axis, axis], K[axis, 2] = focal, centre
    return K.astype(np.float32)


def load_alpha(path: Path, shape) -> np.ndarray:
    """HxW float32 matte in [0, 1]."""
    alpha = _check_size(_read_png(path, cv2.IMREAD_GRAYSCALE), shape, path)
    return alpha.astype(np.float32) / 255.0


def load_foreground(path: Path, shape) -> np.ndarray:
    """HxWx3 float32 RGB foreground in [0, 1]."""
    bgr = _check_size(_read_png(path, cv2.IMREAD_COLOR), shape, path)
    return cv2.cvtColor(bgr, cv2.COLOR_BGR2RGB).astype(np.float32) / 255.0
