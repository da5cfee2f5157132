"""The transform of a dense sample to the input size: a training pipeline (``dense.augment``) when augmenting,
else the validation resize (letterbox or stretch). The geometry it applies is ``dense.geometry``'s."""

from __future__ import annotations

from typing import Mapping

import numpy as np

from datamodules.body_parts import SAPIENS2_PART_CLASSES
from datamodules.dense.augment import PIPELINES, DenseAugment, resolve_augment
from datamodules.dense.geometry import (
    SAPIENS2_FLIP_CLASSES, check_flip_classes, fit_scale, flip_sample, letterbox_matrix, scale_offset_matrix,
    stretch_matrix, warp_sample,
)
from datamodules.dense.maps import MapRule
from datamodules.dense.pipelines import FITS, GENERIC_PIPELINE, LETTERBOX
from datamodules.transforms.photometric import colour_pipeline, degrade_pipeline


class DenseTransform:
    """Training (``augment`` set, its ``pipeline``: see ``dense.augment``) or validation transform to
    ``input_size`` (H, W). Validation resizes by ``fit``: ``letterbox`` (aspect kept, centred, zero padding)
    or ``stretch`` (the seg recipe's). ``maps``: how the task's maps move (``TargetSpec.maps``).

    The generic pipeline (today's set, matting's default) draws in a fixed order (scale, offsets, flip)
    whatever the outcome, so two calls with equally seeded generators differing only in ``flip_prob`` give
    mirror images. The upstream pipelines draw every step's decision whatever its probability, with the
    same effect.
    """

    def __init__(self, input_size: tuple[int, int], augment: DenseAugment | dict | None = None, flip_classes=None,
                 num_classes: int = len(SAPIENS2_PART_CLASSES), fit: str = LETTERBOX,
                 maps: Mapping[str, MapRule] | None = None):
        if fit not in FITS:
            raise ValueError(f"dense/transforms.py: fit must be one of {FITS}, got {fit!r}")
        self.input_size = (int(input_size[0]), int(input_size[1]))
        self.fit = fit
        self.maps = dict(maps or {})
        self.colour_maps = tuple(key for key, rule in self.maps.items() if rule.colour)
        flip_classes = SAPIENS2_FLIP_CLASSES if flip_classes is None and num_classes == 29 else flip_classes
        self.flip_table = (check_flip_classes(flip_classes, num_classes) if flip_classes is not None
                           else None)
        self.augment, self.pipeline, self.photometric = None, None, None
        if augment is not None:
            self.augment = augment = resolve_augment(augment)
            if augment.pipeline == GENERIC_PIPELINE:
                self.photometric = (colour_pipeline(augment.photometric_prob, self.colour_maps),
                                    degrade_pipeline(augment.blur_prob, augment.dropout_prob))
            else:
                self.pipeline = PIPELINES[augment.pipeline](augment, self.input_size, self.flip_table, self.maps)

    def matrix(self, shape: tuple[int, int], rng: np.random.Generator | None = None) -> np.ndarray:
        """Pixel affine: without ``rng`` the validation fit; with it the generic pipeline's random scale
        (``scale_range`` x the letterbox fit) and random crop / pad."""
        if rng is None or self.augment is None:
            return (letterbox_matrix if self.fit == LETTERBOX else stretch_matrix)(shape, self.input_size)
        out_h, out_w = self.input_size
        scale = fit_scale(shape, self.input_size)
        low, high = self.augment.scale_range
        scale *= rng.uniform(low, high)
        offsets = []
        for out, side in ((out_w, shape[1] * scale), (out_h, shape[0] * scale)):
            spare = out - side  # < 0: crop, > 0: pad
            offsets.append(rng.uniform(min(0.0, spare), max(0.0, spare)))
        return scale_offset_matrix(scale, *offsets)

    def change_pixels(self, out: dict, rng: np.random.Generator) -> dict:
        """The generic pipeline's colour changes of the image and of the maps of its colours (``MapRule.colour``, float
        in [0, 1], changed as 8-bit images), then blur and dropout of the image alone."""
        colour, degrade = self.photometric
        colour.set_random_seed(int(rng.integers(2**31)))
        degrade.set_random_seed(int(rng.integers(2**31)))
        maps = {k: np.round(np.clip(out[k], 0, 1) * 255).astype(np.uint8) for k in self.colour_maps if k in out}
        changed = colour(image=out["image"], **maps)
        out = {**out, **{k: changed[k].astype(np.float32) / 255.0 for k in maps}}
        out["image"] = degrade(image=changed["image"])["image"]
        return out

    def __call__(self, sample: dict, rng: np.random.Generator | None = None) -> dict:
        if rng is not None and self.pipeline is not None:
            return self.pipeline(sample, rng)
        out = warp_sample(sample, self.matrix(sample["image"].shape[:2], rng), self.input_size, maps=self.maps)
        if rng is not None and self.augment is not None:
            flip = rng.random() < self.augment.flip_prob
            if self.photometric is not None:
                out = self.change_pixels(out, rng)
            if flip:  # last, as in dense_augment: a flipped sample is the exact mirror of the unflipped one
                out = flip_sample(out, self.flip_table, self.maps)
        return out
