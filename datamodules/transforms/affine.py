"""Top-down crop geometry (UDP): boxes to centre/scale, crop matrices, their inverses.

A crop maps image pixel p to ``S R (p - c) + (out - 1) / 2`` with ``S = diag((W-1)/s_w, (H-1)/s_h)``:
the box centre lands on the crop centre and the box edges on pixel centres 0 and W-1 (the
"unbiased" convention of UDP, so flips and resizes introduce no half-pixel shift).
"""

from __future__ import annotations

import cv2
import numpy as np


def box_to_center_scale(box_xywh, aspect_ratio: float, padding: float = 1.25) -> tuple[np.ndarray, np.ndarray]:
    """Centre (x, y) and scale (w, h) of a box padded by ``padding`` and widened to ``aspect_ratio`` = w/h."""
    x, y, w, h = (float(v) for v in box_xywh)
    center = np.array([x + w * 0.5, y + h * 0.5])
    return center, fix_aspect(np.array([w, h]) * padding, aspect_ratio)


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


def warp_image(image: np.ndarray, matrix: np.ndarray, output_size: tuple[int, int]) -> np.ndarray:
    out_h, out_w = output_size
    return cv2.warpAffine(image, matrix, (out_w, out_h), flags=cv2.INTER_LINEAR, borderValue=0)
