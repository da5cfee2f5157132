"""The upstream checks that leave a dense training sample out after augmentation (not errors: the sample is
replaced by the next one and counted as ``filtered_samples``, see ``loaders.replace_bad_samples``).

Upstream applies them in the packing step, after every augmentation (``*PackInputs`` in
``dense/src/datasets/transforms/{seg,normal,pointmap}_transforms.py``): seg needs 1% of foreground pixels,
normals, pointmaps and albedo at least 16 valid pixels and at most 96% coverage, pointmaps a nearest point at
canonical depth >= 0.04; upstream's albedo dataset also skips images whose albedo is one flat colour. The valid-pixel
checks of the ``mask`` are the filter's own; a task's own checks are its target spec's ``checks``, each reading the
threshold of the field it is named after.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Mapping

import numpy as np

from datamodules.dense.geometry import MASK

Check = Callable[[dict, float], "str | None"]  # (item, threshold) -> why it is left out, or None


@dataclass
class DenseFilter:
    """Training samples left out after augmentation (replaced by the next sample, counted in ``summary.json``
    as ``filtered_samples``). Set a check to 0 (``max_coverage``: 1) to turn it off.

    Args:
        min_valid_pixels: Normal / pointmap / albedo samples with fewer valid (mask) pixels are left out (upstream
            16).
        max_coverage: Normal / pointmap / albedo samples whose valid pixels cover more than this fraction of the
            image are left out (upstream 0.96). Samples without a mask file (every pixel valid by choice) are
            not checked.
        min_depth: Pointmap samples whose nearest valid point has a canonical depth (Z at focal 768) below
            this are left out (upstream 0.04).
        min_foreground: Segmentation samples with a smaller fraction of foreground pixels (a class other than
            0, not 255) are left out (upstream 0.01).
        min_albedo_std: Albedo samples whose valid pixels' albedo has a standard deviation below this in every
            channel (one flat colour) are left out (upstream 0.02).
        val: Also filter validation samples. Upstream's pointmap pipeline does (and substitutes sample 0);
            off so that the metrics cover every validation sample.
    """

    min_valid_pixels: int = 16
    max_coverage: float = 0.96
    min_depth: float = 0.04
    min_foreground: float = 0.01
    min_albedo_std: float = 0.02
    val: bool = False

    def __post_init__(self):
        bad = []
        if self.min_valid_pixels < 0:
            bad.append(f"min_valid_pixels must be >= 0, got {self.min_valid_pixels}")
        for name in ("max_coverage", "min_foreground"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                bad.append(f"{name} must be in [0, 1], got {getattr(self, name)}")
        for name in ("min_depth", "min_albedo_std"):
            if getattr(self, name) < 0:
                bad.append(f"{name} must be >= 0, got {getattr(self, name)}")
        if bad:
            raise ValueError("data.filter: " + "; ".join(bad))

    def reason(self, item: dict, has_mask_file: bool = True,
               checks: Mapping[str, Check] | None = None) -> tuple[str, str] | None:
        """``(check, why)`` when ``item`` (a dataset item of CPU tensors) is left out, else None: the valid-pixel
        checks of its ``mask``, then the task's ``checks`` (its ``TargetSpec.checks``) in order."""
        if MASK in item:
            mask = np.asarray(item[MASK])
            valid = int(np.count_nonzero(mask))
            if valid < self.min_valid_pixels:
                return "min_valid_pixels", f"{valid} valid pixels < min_valid_pixels {self.min_valid_pixels}"
            coverage = valid / mask.size
            if has_mask_file and coverage > self.max_coverage:
                return "max_coverage", f"valid pixels cover {coverage:.1%} > max_coverage {self.max_coverage}"
        for name, check in (checks or {}).items():
            why = check(item, getattr(self, name))
            if why is not None:
                return name, why
        return None


def valid_pixels(item: dict) -> np.ndarray | None:
    """The item's valid-pixel mask when it has one with a valid pixel (what a task's check of its maps reads),
    else None."""
    mask = np.asarray(item[MASK]) if MASK in item else None
    return mask if mask is not None and np.count_nonzero(mask) else None
