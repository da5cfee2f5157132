"""Random top-down crop parameters: flip, half-body, box shift / scale / rotation (upstream recipe)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from datamodules.transforms.affine import fix_aspect


@dataclass
class TopdownAugment:
    """Geometric and photometric training augmentation of pose crops.

    Args:
        flip_prob: Horizontal flip (keypoints swapped with the metainfo flip pairs).
        half_body_prob: Crop to the upper or lower body when enough keypoints are visible.
        half_body_min_keypoints: Visible keypoints needed for a half-body crop.
        half_body_upper_prob: Chance of choosing the upper body.
        half_body_padding: Box padding of the half-body crop.
        shift_factor: Largest box centre shift (uniform), as a fraction of the box size.
        shift_prob: Chance of shifting.
        scale_range: Box scale multiplier range (truncated normal inside it).
        rotate_factor: Largest rotation in degrees (standard normal truncated to +-1, times this).
        rotate_prob: Chance of rotating.
        photometric_prob: Brightness / contrast / hue / saturation distortion.
        blur_prob: Gaussian or median blur.
        dropout_prob: Coarse dropout of one rectangle (20-40% of the crop side).
    """

    flip_prob: float = 0.5
    half_body_prob: float = 0.3
    half_body_min_keypoints: int = 9
    half_body_upper_prob: float = 0.7
    half_body_padding: float = 1.5
    shift_factor: float = 0.16
    shift_prob: float = 0.3
    scale_range: tuple[float, float] = (0.5, 1.5)
    rotate_factor: float = 80.0
    rotate_prob: float = 0.6
    photometric_prob: float = 0.5
    blur_prob: float = 0.1
    dropout_prob: float = 0.5


def _truncnorm(rng: np.random.Generator, low: float = -1.0, high: float = 1.0) -> float:
    while True:
        value = rng.normal()
        if low <= value <= high:
            return float(value)


def half_body_box(keypoints, visible, upper_ids, lower_ids, aug: TopdownAugment, aspect_ratio, rng):
    """Centre/scale around the visible upper or lower body keypoints, or None when not applicable."""
    if visible.sum() < aug.half_body_min_keypoints or not upper_ids or not lower_ids:
        return None
    upper = [k for k in upper_ids if visible[k]]
    lower = [k for k in lower_ids if visible[k]]
    if rng.random() < aug.half_body_upper_prob:
        chosen = upper if len(upper) >= 2 else lower
    else:
        chosen = lower if len(lower) >= 2 else upper
    if len(chosen) < 2:
        return None
    points = keypoints[chosen]
    low, high = points.min(0), points.max(0)
    center = (low + high) * 0.5
    return center, fix_aspect((high - low) * aug.half_body_padding, aspect_ratio)


def random_box(center, scale, aug: TopdownAugment, rng) -> tuple[np.ndarray, np.ndarray, float]:
    """Shift, rescale and rotate a crop box; returns (center, scale, rotation in degrees)."""
    center, scale = np.array(center, dtype=np.float64), np.array(scale, dtype=np.float64)
    if rng.random() < aug.shift_prob:
        center = center + rng.uniform(-1, 1, size=2) * aug.shift_factor * scale
    low, high = aug.scale_range
    scale = scale * (_truncnorm(rng) * (high - low) * 0.5 + (high + low) * 0.5)
    rotation = _truncnorm(rng) * aug.rotate_factor if rng.random() < aug.rotate_prob else 0.0
    return center, scale, rotation
