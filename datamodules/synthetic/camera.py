"""Pinhole camera in the OpenCV convention: x right, y down, z forward, metres.

Pixel coordinates put pixel centres at integer positions: pixel (row i, column j) is
the ray through image point (u=j, v=i).
"""

import numpy as np


def sample_intrinsics(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """Random 3x3 K: fx = fy in [0.9, 1.7] x the larger image side, centre near the middle."""
    focal = rng.uniform(0.9, 1.7) * max(height, width)
    cx = (width - 1) / 2 + rng.uniform(-0.02, 0.02) * width
    cy = (height - 1) / 2 + rng.uniform(-0.02, 0.02) * height
    return np.array([[focal, 0.0, cx], [0.0, focal, cy], [0.0, 0.0, 1.0]])


def project(K: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Camera-space points (..., 3) -> pixel coordinates (..., 2)."""
    z = points[..., 2:3]
    return (points[..., :2] / z) * np.array([K[0, 0], K[1, 1]]) + np.array([K[0, 2], K[1, 2]])


def ray_directions(K: np.ndarray, u: np.ndarray, v: np.ndarray) -> tuple:
    """Un-normalised ray directions (dx, dy, 1) through pixel points; a hit at ``t`` has depth ``t``."""
    return (u - K[0, 2]) / K[0, 0], (v - K[1, 2]) / K[1, 1]


def back_project(K: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """HxW z-depth -> HxWx3 camera-space points (pixel centres)."""
    height, width = depth.shape
    dx, dy = ray_directions(K, np.arange(width)[None, :], np.arange(height)[:, None])
    return np.stack([dx * depth, dy * depth, depth], axis=-1)


def box_to_pixels(K: np.ndarray, low: np.ndarray, high: np.ndarray, height: int, width: int):
    """Projected pixel windows (x0, y0, x1, y1; end-exclusive, clipped) of 3-D boxes (n,3).

    Returns an (n,4) int array; boxes reaching behind the camera get the whole image.
    """
    corners = np.stack(
        [np.stack([xs, ys, zs], axis=-1)
         for xs in (low[:, 0], high[:, 0]) for ys in (low[:, 1], high[:, 1]) for zs in (low[:, 2], high[:, 2])],
        axis=1,
    )  # (n, 8, 3)
    in_front = corners[..., 2].min(axis=1) > 1e-3
    corners[..., 2] = np.maximum(corners[..., 2], 1e-3)
    pixels = project(K, corners)
    x0 = np.floor(pixels[..., 0].min(axis=1)) - 1
    y0 = np.floor(pixels[..., 1].min(axis=1)) - 1
    x1 = np.ceil(pixels[..., 0].max(axis=1)) + 2
    y1 = np.ceil(pixels[..., 1].max(axis=1)) + 2
    box = np.stack([x0, y0, x1, y1], axis=1)
    box[~in_front] = [0, 0, width, height]
    box = np.clip(box, 0, [width, height, width, height])
    return box.astype(np.int64)
