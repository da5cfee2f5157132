"""Pointmap targets: ``{split}/depth/NAME.npy`` (HxW z-depth) with ``{split}/intrinsics/NAME.txt`` (3x3 K), or
``{split}/pointmaps/NAME.npy`` (HxWx3 camera XYZ) with optional intrinsics (absent: fitted to the points), and an
optional ``{split}/masks/NAME.png`` of valid pixels.

Dataset item: ``pointmap`` float32 (3, H, W) canonical XYZ (``dense.geometry.canonical_pointmap``) + ``mask`` +
``scale`` + ``intrinsics`` (3, 3) of the output image. Trained with the upstream camera pipeline without its
image-only degradations; never rotated (upstream does not rotate pointmaps).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from datamodules.dense.filters import valid_pixels
from datamodules.dense.geometry import canonical_pointmap
from datamodules.dense.maps import DEPTHS, POINTS
from datamodules.dense.readers import check_size, chw, read_npy, read_text, valid_mask
from datamodules.dense.target_spec import Attempt, TargetSpec, raise_problems
from datamodules.errors import DataError


def paths(split_dir: Path, name: str) -> tuple[dict[str, Path], dict[str, Path]]:
    """Depth + intrinsics (required), or a pointmap file when there is no depth file (intrinsics optional)."""
    def p(folder: str, suffix: str) -> Path:
        return split_dir / folder / f"{name}{suffix}"

    optional = {"mask": p("masks", ".png")}
    if p("pointmaps", ".npy").exists() and not p("depth", ".npy").exists():
        return {"pointmap": p("pointmaps", ".npy")}, {**optional, "intrinsics": p("intrinsics", ".txt")}
    return {"depth": p("depth", ".npy"), "intrinsics": p("intrinsics", ".txt")}, optional


def load_depth(path: Path, shape, mask: np.ndarray) -> np.ndarray:
    """HxW float32 z-depth, finite and > 0 on ``mask``."""
    depth = check_size(read_npy(path), shape, path)
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
    xyz = check_size(read_npy(path), shape, path)
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
        K = np.loadtxt(read_text(path), dtype=np.float64, ndmin=2)
    except (OSError, ValueError, UnicodeDecodeError) as err:
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


def load(files: dict[str, Path], shape, num_classes: int, attempt: Attempt = raise_problems) -> dict:
    """``mask``, ``depth`` or ``pointmap``, and ``K`` of one image."""
    out = {"mask": valid_mask(files, shape, attempt)}
    mask = out["mask"]
    if "depth" in files:
        out["depth"] = attempt("depth", lambda: load_depth(files["depth"], shape, mask))
        out["K"] = attempt("intrinsics", lambda: load_intrinsics(files["intrinsics"]))
        return out
    out["pointmap"] = points = attempt("pointmap", lambda: load_pointmap(files["pointmap"], shape, mask))
    if "intrinsics" in files:
        out["K"] = attempt("intrinsics", lambda: load_intrinsics(files["intrinsics"]))
    elif points is not None:
        out["K"] = attempt("intrinsics", lambda: fit_intrinsics(points, mask, files["pointmap"]))
    return out


def to_item(sample: dict, canonical_focal: float) -> dict:
    """Canonical ``pointmap`` (0 off the mask), ``mask``, its ``scale`` (canonical focal / fx) and ``intrinsics``."""
    xyz, scale = canonical_pointmap(sample.get("depth", sample.get("pointmap")), sample["K"], canonical_focal)
    mask = sample["mask"]
    return {"pointmap": chw(np.where(mask[..., None], xyz, 0).astype(np.float32)), "mask": torch.from_numpy(mask),
            "scale": torch.tensor(scale, dtype=torch.float32),
            "intrinsics": torch.from_numpy(sample["K"].astype(np.float32))}


def too_near(item: dict, min_depth: float) -> str | None:
    """Why a sample whose nearest valid point has a canonical depth below ``min_depth`` is left out (upstream's
    pointmap filter)."""
    mask = valid_pixels(item)
    if mask is None:
        return None
    nearest = float(np.asarray(item["pointmap"])[2][mask].min())
    if nearest < min_depth:
        return f"nearest canonical depth {nearest:.3g} < min_depth {min_depth}"
    return None


TARGETS = TargetSpec(
    "pointmap", paths, load, to_item, pipeline="camera", maps={"depth": DEPTHS, "pointmap": POINTS},
    augment=dict(downup_prob=0.0, blur_prob=0.0, noise_prob=0.0, solarize_prob=0.0),
    fixed={"rotate_prob": "pointmaps are not rotated (upstream does not; a rotation would be a camera roll about "
                          "the principal point only)"},
    checks={"min_depth": too_near},
)
