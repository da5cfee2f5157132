"""Image-only augmentation with albumentations: colour distortion, blur, coarse dropout."""

from __future__ import annotations

import albumentations as A


def photometric_pipeline(photometric_prob: float, blur_prob: float, dropout_prob: float) -> A.Compose:
    """Touches pixels only; keypoints and targets are unaffected."""
    return A.Compose([
        A.RandomBrightnessContrast(brightness_limit=0.125, contrast_limit=0.5, p=photometric_prob),
        A.HueSaturationValue(hue_shift_limit=18, sat_shift_limit=30, val_shift_limit=0, p=photometric_prob),
        A.OneOf([A.Blur(blur_limit=(3, 7)), A.MedianBlur(blur_limit=(3, 7))], p=blur_prob),
        A.CoarseDropout(num_holes_range=(1, 1), hole_height_range=(0.2, 0.4), hole_width_range=(0.2, 0.4),
                        fill=0, p=dropout_prob),
    ])
