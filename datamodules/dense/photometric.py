"""Image-only operations of the upstream dense recipes, every random draw from the generator passed in.

Each takes an HxWx3 uint8 RGB image and returns a new uint8 image; targets are never touched. The
numbers are upstream's defaults (``engine/datasets/transforms/common_transforms.py`` of Sapiens2).
"""

from __future__ import annotations

import cv2
import numpy as np

DOWN_UP_INTERPOLATIONS = (cv2.INTER_NEAREST, cv2.INTER_LINEAR, cv2.INTER_CUBIC, cv2.INTER_AREA, cv2.INTER_LANCZOS4)


def _affine_uint8(values: np.ndarray, gain: float = 1.0, offset: float = 0.0) -> np.ndarray:
    """``values * gain + offset`` clipped to [0, 255] and truncated to uint8."""
    return np.clip(values.astype(np.float32) * gain + offset, 0, 255).astype(np.uint8)


def photometric_distortion(image: np.ndarray, rng: np.random.Generator, brightness_delta: float = 32.0,
                           contrast: tuple[float, float] = (0.5, 1.5), saturation: tuple[float, float] = (0.5, 1.5),
                           hue_delta: int = 18) -> np.ndarray:
    """Brightness shift, contrast gain (before or after the colour steps, chosen at random), saturation
    gain and hue shift (OpenCV hue units, 0-179), each applied with probability 1/2."""
    if rng.integers(2):
        image = _affine_uint8(image, offset=rng.uniform(-brightness_delta, brightness_delta))
    contrast_first = bool(rng.integers(2))
    if contrast_first and rng.integers(2):
        image = _affine_uint8(image, gain=rng.uniform(*contrast))
    if rng.integers(2):
        hsv = cv2.cvtColor(image, cv2.COLOR_RGB2HSV)
        hsv[..., 1] = _affine_uint8(hsv[..., 1], gain=rng.uniform(*saturation))
        image = cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB)
    if rng.integers(2):
        hsv = cv2.cvtColor(image, cv2.COLOR_RGB2HSV)
        hsv[..., 0] = (hsv[..., 0].astype(np.int64) + int(rng.integers(-hue_delta, hue_delta + 1))) % 180
        image = cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB)
    if not contrast_first and rng.integers(2):
        image = _affine_uint8(image, gain=rng.uniform(*contrast))
    return image


def gaussian_blur(image: np.ndarray, rng: np.random.Generator, sigma_range=(0.1, 2.0), kernel: int = 3) -> np.ndarray:
    """Gaussian blur with a ``kernel`` x ``kernel`` window and a random sigma."""
    return cv2.GaussianBlur(image, (kernel, kernel), float(rng.uniform(*sigma_range)))


def gaussian_noise(image: np.ndarray, rng: np.random.Generator, var_range=(5.0, 20.0)) -> np.ndarray:
    """Zero-mean Gaussian noise per pixel and channel, variance drawn from ``var_range`` (intensity units^2)."""
    sigma = float(np.sqrt(rng.uniform(*var_range)))
    noise = rng.standard_normal(image.shape, dtype=np.float32) * sigma
    return np.clip(image.astype(np.float32) + noise, 0, 255).astype(np.uint8)


def solarize(image: np.ndarray, threshold: int = 128) -> np.ndarray:
    """Values above ``threshold`` are inverted (v -> 255 - v)."""
    return np.where(image > threshold, 255 - image, image).astype(np.uint8)


def down_up_sample(image: np.ndarray, rng: np.random.Generator, scale_range=(0.1, 0.7)) -> np.ndarray:
    """Shrink by a random factor and enlarge back to the same size, each with a random interpolation."""
    height, width = image.shape[:2]
    factor = rng.uniform(*scale_range)
    down = rng.integers(len(DOWN_UP_INTERPOLATIONS))
    up = rng.integers(len(DOWN_UP_INTERPOLATIONS))
    small = cv2.resize(image, (max(1, int(width * factor)), max(1, int(height * factor))),
                       interpolation=DOWN_UP_INTERPOLATIONS[down])
    return cv2.resize(small, (width, height), interpolation=DOWN_UP_INTERPOLATIONS[up])


def coarse_dropout(image: np.ndarray, rng: np.random.Generator, size_range=(0.2, 0.4)) -> np.ndarray:
    """One black rectangle whose sides are a random fraction of the image's."""
    height, width = image.shape[:2]
    box_h = max(1, int(round(height * rng.uniform(*size_range))))
    box_w = max(1, int(round(width * rng.uniform(*size_range))))
    top, left = int(rng.integers(0, height - box_h + 1)), int(rng.integers(0, width - box_w + 1))
    image = image.copy()
    image[top:top + box_h, left:left + box_w] = 0
    return image
