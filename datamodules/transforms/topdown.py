"""Random top-down crop parameters as upstream Sapiens2 draws them: half-body, box shift / scale / rotation.

Order of upstream's training pipeline: padded box -> half-body -> shift / scale / rotation -> aspect fixed to
the input's W/H -> crop. The shift is a fraction of the box *before* the aspect fix.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import numpy as np


@dataclass
class TopdownAugment:
    """Geometric and photometric training augmentation of pose crops (defaults: upstream Sapiens2).

    Args:
        flip_prob: Horizontal flip (keypoints swapped with the metainfo flip pairs).
        half_body_prob: Crop to the upper or lower body (when the thresholds below allow it).
        half_body_min_keypoints: Visible keypoints needed for a half-body crop.
        half_body_min_upper: Visible upper-body keypoints needed to crop the upper body.
        half_body_min_lower: Visible lower-body keypoints needed to crop the lower body.
        half_body_upper_prob: Chance of preferring the upper body when both halves qualify.
        half_body_padding: The half-body box is the chosen keypoints' extent x this, centred on their mean.
        shift_factor: Box centre shift = truncated normal in [-1, 1] x this x the box size (per axis).
        shift_prob: Chance of shifting.
        scale_range: Box scale multiplier: truncated normal in [-1, 1] mapped onto this range.
        scale_prob: Chance of rescaling.
        rotate_factor: Rotation in degrees: truncated normal in [-1, 1] x this.
        rotate_prob: Chance of rotating.
        photometric_prob: Upstream's photometric distortion (brightness +-32, contrast and saturation x0.5-1.5,
            hue +-18, each step with chance 1/2).
        blur_prob: Box blur, kernel 3-7.
        median_blur_prob: Median blur, kernel 3-7 (independent of ``blur_prob``).
        dropout_prob: Coarse dropout (black rectangles).
        dropout_holes: Number of dropout rectangles (min, max). Upstream's config asks for 1 hole of 20-40% in
            albumentations 1.x argument names, which albumentations 2.x ignores; its defaults (1-2 holes of
            10-20%) are what upstream actually ran, so they are the defaults here.
        dropout_size: Rectangle height and width as fractions of the crop side (min, max).
    """

    flip_prob: float = 0.5
    half_body_prob: float = 0.3
    half_body_min_keypoints: int = 9
    half_body_min_upper: int = 2
    half_body_min_lower: int = 3
    half_body_upper_prob: float = 0.7
    half_body_padding: float = 1.5
    shift_factor: float = 0.16
    shift_prob: float = 0.3
    scale_range: tuple[float, float] = (0.5, 1.5)
    scale_prob: float = 1.0
    rotate_factor: float = 80.0
    rotate_prob: float = 0.6
    photometric_prob: float = 0.8
    blur_prob: float = 0.1
    median_blur_prob: float = 0.1
    dropout_prob: float = 1.0
    dropout_holes: tuple[int, int] = (1, 2)
    dropout_size: tuple[float, float] = (0.1, 0.2)

    def __post_init__(self):
        self.scale_range = tuple(self.scale_range)
        self.dropout_holes = tuple(self.dropout_holes)
        self.dropout_size = tuple(self.dropout_size)
        bad = [f"{f.name} must be in [0, 1], got {getattr(self, f.name)}" for f in fields(self)
               if f.name.endswith("_prob") and not 0 <= getattr(self, f.name) <= 1]
        low, high = self.scale_range
        if not 0 < low <= high:
            bad.append(f"scale_range must be 0 < min <= max, got {self.scale_range}")
        holes = self.dropout_holes
        if len(holes) != 2 or not all(int(h) == h for h in holes) or not 1 <= holes[0] <= holes[1]:
            bad.append(f"dropout_holes must be integers 1 <= min <= max, got {holes}")
        if len(self.dropout_size) != 2 or not 0 < self.dropout_size[0] <= self.dropout_size[1] <= 1:
            bad.append(f"dropout_size must be 0 < min <= max <= 1, got {self.dropout_size}")
        for name in ("half_body_padding", "shift_factor", "rotate_factor", "half_body_min_keypoints",
                     "half_body_min_upper", "half_body_min_lower"):
            if getattr(self, name) < 0:
                bad.append(f"{name} must be >= 0, got {getattr(self, name)}")
        if bad:
            raise ValueError("data.augment: " + "; ".join(bad))


def truncated_normal(rng: np.random.Generator, size: int | None = None):
    """Standard normal truncated to [-1, 1] (scipy's ``truncnorm(-1, 1)``), by rejection."""
    if size is None:
        return float(truncated_normal(rng, 1)[0])
    out = np.empty(0)
    while out.size < size:
        draw = rng.normal(size=2 * size)
        out = np.concatenate([out, draw[np.abs(draw) <= 1.0]])
    return out[:size]


def half_body_box(keypoints, visible, upper_ids, lower_ids, aug: TopdownAugment, rng):
    """Upstream's half-body box, or None: with ``half_body_prob`` when enough keypoints are visible, the
    visible upper or lower body (see the thresholds); centre = their mean, scale = their extent x padding
    (aspect not fixed yet). A chosen set of identical points (zero extent) gives None."""
    if visible.sum() < aug.half_body_min_keypoints or rng.random() >= aug.half_body_prob:
        return None
    upper = [k for k in upper_ids if visible[k]]
    lower = [k for k in lower_ids if visible[k]]
    prefer_upper = rng.random() < aug.half_body_upper_prob
    upper_ok, lower_ok = len(upper) >= aug.half_body_min_upper, len(lower) >= aug.half_body_min_lower
    if not (upper_ok or lower_ok):
        return None
    points = np.asarray(keypoints, dtype=np.float64)[upper if upper_ok and (prefer_upper or not lower_ok) else lower]
    scale = (points.max(0) - points.min(0)) * aug.half_body_padding
    if not scale.any():
        return None
    return points.mean(0), scale


def random_box(center, scale, aug: TopdownAugment, rng) -> tuple[np.ndarray, np.ndarray, float]:
    """Shift, rescale and rotate a crop box as upstream; returns (center, scale, rotation in degrees)."""
    center, scale = np.array(center, dtype=np.float64), np.array(scale, dtype=np.float64)
    if rng.random() < aug.shift_prob:
        center = center + truncated_normal(rng, 2) * aug.shift_factor * scale
    if rng.random() < aug.scale_prob:
        low, high = aug.scale_range
        scale = scale * (truncated_normal(rng) * (high - low) * 0.5 + (high + low) * 0.5)
    rotation = truncated_normal(rng) * aug.rotate_factor if rng.random() < aug.rotate_prob else 0.0
    return center, scale, rotation
