"""Image-only augmentation with albumentations: colour distortion, blur, coarse dropout.

Pipelines here are :class:`SeededCompose`: ``set_random_seed(s)`` gives all their transforms one shared
random stream, so each transform's coin is independent of the others. (A plain ``A.Compose`` seeds
every child with the same seed, so equal probabilities fire together: Blur and MedianBlur at p 0.1
would always come as a pair.)
"""

from __future__ import annotations

import random

import albumentations as A
import cv2
import numpy as np


class SeededCompose(A.Compose):
    """``A.Compose`` whose ``set_random_seed`` puts every child on one shared stream (independent coins)."""

    def set_random_seed(self, seed: int | None) -> None:
        self.seed = seed
        self.set_random_state(np.random.default_rng(seed), random.Random(seed))


class PhotometricDistortion(A.ImageOnlyTransform):
    """Upstream Sapiens2's photometric distortion of uint8 RGB images (no albumentations transform matches it).

    Each step happens with chance 1/2: brightness ``+ U(-brightness_delta, brightness_delta)``; contrast
    ``x U(contrast_range)``, either first or last (chance 1/2 each); saturation ``S x U(saturation_range)``
    in OpenCV HSV; hue ``H + randint(-hue_delta, hue_delta)`` (inclusive) mod 180. Every step clips to
    [0, 255] and truncates to uint8. ``p``: chance of distorting at all.
    """

    def __init__(self, brightness_delta: float = 32, contrast_range: tuple[float, float] = (0.5, 1.5),
                 saturation_range: tuple[float, float] = (0.5, 1.5), hue_delta: int = 18, p: float = 0.5):
        super().__init__(p=p)
        for name, (low, high) in (("contrast_range", contrast_range), ("saturation_range", saturation_range)):
            if not 0 <= low <= high:
                raise ValueError(f"PhotometricDistortion: {name} must be 0 <= low <= high, got {(low, high)}")
        if brightness_delta < 0 or hue_delta < 0:
            raise ValueError(f"PhotometricDistortion: brightness_delta and hue_delta must be >= 0, got "
                             f"{brightness_delta}, {hue_delta}")
        self.brightness_delta = float(brightness_delta)
        self.contrast_range = tuple(float(v) for v in contrast_range)
        self.saturation_range = tuple(float(v) for v in saturation_range)
        self.hue_delta = int(hue_delta)

    def get_params(self) -> dict:
        r = self.py_random
        return {
            "beta": r.uniform(-self.brightness_delta, self.brightness_delta) if r.random() < 0.5 else None,
            "contrast_first": r.random() < 0.5,
            "alpha": r.uniform(*self.contrast_range) if r.random() < 0.5 else None,
            "saturation": r.uniform(*self.saturation_range) if r.random() < 0.5 else None,
            "hue": r.randint(-self.hue_delta, self.hue_delta) if r.random() < 0.5 else None,
        }

    def apply(self, img: np.ndarray, beta=None, contrast_first=False, alpha=None, saturation=None, hue=None,
              **params) -> np.ndarray:
        if img.dtype != np.uint8 or img.ndim != 3 or img.shape[2] != 3:
            raise TypeError(f"PhotometricDistortion needs an HxWx3 uint8 image, got {img.dtype} {img.shape}")
        if beta is not None:
            img = _affine_uint8(img, 1.0, beta)
        if contrast_first and alpha is not None:
            img = _affine_uint8(img, alpha, 0.0)
        if saturation is not None:  # two separate HSV round trips, as upstream (each rounds to uint8)
            hsv = cv2.cvtColor(img, cv2.COLOR_RGB2HSV)
            hsv[..., 1] = _affine_uint8(hsv[..., 1], saturation, 0.0)
            img = cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB)
        if hue is not None:
            hsv = cv2.cvtColor(img, cv2.COLOR_RGB2HSV)
            hsv[..., 0] = (hsv[..., 0].astype(np.int64) + hue) % 180
            img = cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB)
        if not contrast_first and alpha is not None:
            img = _affine_uint8(img, alpha, 0.0)
        return img

    def get_transform_init_args_names(self) -> tuple[str, ...]:
        return "brightness_delta", "contrast_range", "saturation_range", "hue_delta"


def _affine_uint8(img: np.ndarray, alpha: float, beta: float) -> np.ndarray:
    return np.clip(img.astype(np.float32) * alpha + beta, 0, 255).astype(np.uint8)


def pose_photometric_pipeline(photometric_prob: float = 0.8, blur_prob: float = 0.1, median_blur_prob: float = 0.1,
                              dropout_prob: float = 1.0, dropout_holes: tuple[int, int] = (1, 2),
                              dropout_size: tuple[float, float] = (0.1, 0.2)) -> SeededCompose:
    """Upstream's pose pipeline after the crop: photometric distortion, Blur, MedianBlur (each kernel 3-7,
    independent coins), CoarseDropout of ``dropout_holes`` holes, each side ``dropout_size`` of the crop side."""
    return SeededCompose([
        PhotometricDistortion(p=photometric_prob),
        A.Blur(blur_limit=(3, 7), p=blur_prob),
        A.MedianBlur(blur_limit=(3, 7), p=median_blur_prob),
        A.CoarseDropout(num_holes_range=tuple(dropout_holes), hole_height_range=tuple(dropout_size),
                        hole_width_range=tuple(dropout_size), fill=0, p=dropout_prob),
    ])


def colour_pipeline(photometric_prob: float, colour_targets=()) -> SeededCompose:
    """The generic dense-task colour changes (not upstream's pose set), pixel by pixel; the same changes reach the
    uint8 images named in ``colour_targets`` (a matting foreground, whose colours are the image's)."""
    return SeededCompose([
        A.RandomBrightnessContrast(brightness_limit=0.125, contrast_limit=0.5, p=photometric_prob),
        A.HueSaturationValue(hue_shift_limit=18, sat_shift_limit=30, val_shift_limit=0, p=photometric_prob),
    ], additional_targets={name: "image" for name in colour_targets})


def degrade_pipeline(blur_prob: float, dropout_prob: float) -> SeededCompose:
    """The generic dense-task blur and coarse dropout: the image only; targets are unaffected."""
    return SeededCompose([
        A.OneOf([A.Blur(blur_limit=(3, 7)), A.MedianBlur(blur_limit=(3, 7))], p=blur_prob),
        A.CoarseDropout(num_holes_range=(1, 1), hole_height_range=(0.2, 0.4), hole_width_range=(0.2, 0.4),
                        fill=0, p=dropout_prob),
    ])
