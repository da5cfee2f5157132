"""Top-down crop geometry (UDP): boxes to centre/scale, crop matrices, their inverses.

A crop maps image pixel p to ``S R (p - c) + (out - 1) / 2`` with ``S = diag((W-1)/s_w, (H-1)/s_h)``:
the box centre lands on the crop centre and the box edges on pixel centres 0 and W-1 (the
"unbiased" convention of UDP, so flips and resizes introduce no half-pixel shift).
"""

from __future__ import annotations

import cv2
import numpy as np


def box_to_center_scale(box_xywh, aspect_ratio: float | None,
                        padding: float = 1.25) -> tuple[np.ndarray, np.ndarray]:
    """Centre (x, y) and scale (w, h) of a box padded by ``padding`` and widened to ``aspect_ratio`` = w/h
    (``None``: left as it is; upstream's training crop fixes the aspect only after the box jitter)."""
    x, y, w, h = (float(v) for v in box_xywh)
    center = np.array([x + w * 0.5, y + h * 0.5])
    scale = np.array([w, h]) * padding
    return center, scale if aspect_ratio is None else fix_aspect(scale, aspect_ratio)


def fix_aspect(scale: np.ndarray, aspect_ratio: float) -> np.ndarray:
    """Grow the shorter side so that w / h == aspect_ratio."""
    w, h = scale
    return np.array([max(w, h * aspect_ratio), max(h, w / aspect_ratio)])


def crop_matrix(center, scale, rotation_deg: float, output_size: tuple[int, int]) -> np.ndarray:
    """2x3 matrix taking image pixels to crop pixels; ``output_size`` is (H, W)."""
    out_h, out_w = output_size
    theta = np.deg2rad(rotation_deg)
    cos, sin = np.cos(theta), np.sin(theta)
    sx, sy = (out_w - 1) / scale[0], (out_h - 1) / scale[1]
    linear = np.array([[sx * cos, -sx * sin], [sy * sin, sy * cos]])
    offset = np.array([(out_w - 1) * 0.5, (out_h - 1) * 0.5]) - linear @ np.asarray(center, dtype=np.float64)
    return np.concatenate([linear, offset[:, None]], axis=1)


def hflip_matrix(width: int) -> np.ndarray:
    """Mirror inside a crop of ``width`` pixels: x -> (W - 1) - x."""
    return np.array([[-1.0, 0.0, width - 1.0], [0.0, 1.0, 0.0]])


def compose(outer: np.ndarray, inner: np.ndarray) -> np.ndarray:
    """The 2x3 matrix of ``outer(inner(p))``."""
    return outer @ np.vstack([inner, [0.0, 0.0, 1.0]])


def invert(matrix: np.ndarray) -> np.ndarray:
    return cv2.invertAffineTransform(matrix)


def transform_points(points: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """Apply a 2x3 matrix to (..., 2) points."""
    return points @ matrix[:, :2].T + matrix[:, 2]


def inside_crop(points: np.ndarray, output_size: tuple[int, int]) -> np.ndarray:
    """(...,) bool: crop-pixel points (..., 2) with 0 <= x < W and 0 <= y < H (upstream's bound for
    keeping a keypoint's weight after the crop); ``output_size`` is (H, W)."""
    out_h, out_w = output_size
    x, y = points[..., 0], points[..., 1]
    return (x >= 0) & (x < out_w) & (y >= 0) & (y < out_h)


def crop_interpolation(matrix: np.ndarray) -> int:
    """Upstream's choice for pose crops: ``INTER_AREA`` when the crop shrinks the image (the smaller row norm
    of the linear part below 1), else ``INTER_CUBIC``. (``cv2.warpAffine`` runs ``INTER_AREA`` as bilinear.)"""
    shrink = min(np.linalg.norm(matrix[0, :2]), np.linalg.norm(matrix[1, :2]))
    return cv2.INTER_AREA if shrink < 1.0 else cv2.INTER_CUBIC


def warp_image(image: np.ndarray, matrix: np.ndarray, output_size: tuple[int, int],
               interpolation: int = cv2.INTER_LINEAR) -> np.ndarray:
    """``image`` through the 2x3 ``matrix`` into ``output_size`` (H, W); outside pixels are 0."""
    out_h, out_w = output_size
    return cv2.warpAffine(image, matrix, (out_w, out_h), flags=interpolation, borderValue=0)
