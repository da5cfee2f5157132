"""Training augmentation of dense samples: the upstream Sapiens2 recipes per task, as one config.

Two pipelines follow the upstream train pipelines (``dense/configs/{seg,normal,pointmap}/**``; the ops in
``dense/src/datasets/transforms/*_transforms.py`` and ``engine/datasets/transforms/common_transforms.py``),
in their order; the generic one (matting's default; upstream has no matting training code) is
``DenseTransform``'s own. Geometry is done with the affine warps of ``dense.geometry`` so that labels,
masks, normals, depth and intrinsics stay consistent; the intermediate resolution upstream works at (after
its rescale and crop) is materialised, everything after it is composed into one more warp.

- ``seg``: background replacement -> resize to the input size x U(0.4, 2) (aspect kept) -> crop of the
  input size (padded when smaller, labels 255; redrawn while one class dominates) -> Gaussian blur /
  noise -> rotation about the centre (corners black, label 0) -> flip -> colour distortion -> stretched
  (not letterboxed) to the input size -> dropout. Validation stretches too.
- ``camera`` (normal, pointmap): colour distortion -> down/up-sampling -> scale x U(0.5, 2) -> crop of
  random area / aspect -> flip -> letterbox to the input size -> Gaussian blur / noise / solarize.
  Pointmaps upstream get no down/up-sampling, blur, noise or solarize, and no rotation.

The flip is drawn where upstream flips and applied last (``_flipped``), an equivalent order that keeps flipped
samples exact mirrors on every CPU.

Every random draw comes from the per-sample generator; every step draws its decision whatever its
probability, so the draws of later steps do not depend on earlier probabilities.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Literal, Mapping

import numpy as np

from datamodules.dense.background import BackgroundSource, replace_background
from datamodules.dense.photometric import (
    coarse_dropout, down_up_sample, gaussian_blur, gaussian_noise, photometric_distortion, solarize,
)
from datamodules.dense.geometry import (
    IGNORE_INDEX, MASK, compose, fit_scale, flip_sample, letterbox_matrix, rotation_matrix, scale_offset_matrix,
    stretch_matrix, warp_nearest, warp_sample,
)
from datamodules.dense.maps import MapRule
from datamodules.dense.pipelines import (
    CAMERA_PIPELINE, GENERIC_PIPELINE, PIPELINE_FIT, PIPELINE_NAMES, SEG_PIPELINE,
)
from datamodules.dense.target_spec import TargetSpec

Range = tuple[float, float]


@dataclass
class DenseAugment:
    """Training augmentation of dense samples. A field left unset (null) takes the task's default: the
    upstream Sapiens2 recipe for seg, normal and pointmap, the generic set for matting (``task_defaults``: each
    task's pipeline defaults with its target spec's changes).

    Args:
        pipeline: ``seg`` (upstream segmentation order, stretched to the input size; validation stretches
            too), ``camera`` (upstream normal / pointmap / albedo order, letterboxed) or ``generic`` (letterbox
            scale with random crop / pad, flip, albumentations colour / blur / dropout). Default: seg -> seg,
            normal / pointmap / albedo -> camera, matting -> generic. A field the pipeline does not use must stay unset.
        flip_prob: Horizontal flip (Left/Right classes swapped, n_x and X negated, cx mirrored).
            seg 0.5, normal / pointmap / albedo 0.3, generic 0.5.
        scale_range: Random scale factor. seg: of the input size the image is fitted into, (0.4, 2.0);
            camera: of the image, (0.5, 2.0); generic: of the letterbox fit, (0.75, 1.5).
        scale_prob: Chance of the random scale: seg 1.0, camera 0.3.
        crop_prob: Chance of a random crop: seg 0.3 (a window of the input size, padded when the image is
            smaller), camera 0.3 (a window of random area and aspect).
        crop_max_class_ratio: seg: a crop window is drawn again (up to 10 times) while a single class has
            this share or more of its labelled pixels (0.75).
        crop_area_range: camera: window area as a fraction of the image (0.4, 1.0).
        crop_aspect_range: camera: window width / height (0.5, 2.0); after 8 windows that do not fit, no crop.
        rotate_prob: Rotation about the image centre: seg 0.5, normal 0 (not upstream; normals turn with
            the image); pointmaps are never rotated (upstream does not).
        rotate_degrees: The angle is uniform in [-rotate_degrees, rotate_degrees] (60).
        background_prob: seg: pixels labelled 0 get a new background, the figure's colours are matched to
            it (0.8). Upstream skips this for in-the-wild photos: set 0 where backgrounds are real.
        background_dir: Folder of background images (jpg / png) for ``background_prob``; unset: procedural
            backgrounds (``datamodules/synthetic/background.py``).
        downup_prob: Image shrunk by ``downup_range`` and enlarged back (targets untouched): normal 0.2, albedo 0.
        downup_range: Shrink factor range of ``downup_prob`` (0.1, 0.7).
        photometric_prob: Colour distortion. seg / camera: upstream's brightness, contrast, saturation and
            hue changes (each with chance 1/2), 1.0 (albedo 0: upstream has none there); generic: albumentations
            colour jitter, 0.5.
        blur_prob: Blur: seg / normal 0.3 (3x3 Gaussian, sigma 0.1-2), pointmap / albedo 0; generic 0.1
            (Gaussian or median).
        noise_prob: Gaussian noise of variance 5-20: seg / normal 0.3, albedo 0.2, pointmap 0.
        solarize_prob: Solarize (values above 128 inverted): normal 0.3.
        dropout_prob: One black rectangle of 20-40% of each side (0).
    """

    pipeline: Literal[PIPELINE_NAMES] | None = None
    flip_prob: float | None = None
    scale_range: Range | None = None
    scale_prob: float | None = None
    crop_prob: float | None = None
    crop_max_class_ratio: float | None = None
    crop_area_range: Range | None = None
    crop_aspect_range: Range | None = None
    rotate_prob: float | None = None
    rotate_degrees: float | None = None
    background_prob: float | None = None
    background_dir: str | None = None
    downup_prob: float | None = None
    downup_range: Range | None = None
    photometric_prob: float | None = None
    blur_prob: float | None = None
    noise_prob: float | None = None
    solarize_prob: float | None = None
    dropout_prob: float | None = None


_UPSTREAM = dict(scale_prob=1.0, rotate_prob=0.0, rotate_degrees=60.0, downup_prob=0.0, downup_range=(0.1, 0.7),
                 photometric_prob=1.0, blur_prob=0.0, noise_prob=0.0, solarize_prob=0.0, dropout_prob=0.0)
# Each pipeline's defaults: the upstream seg and normal recipes, and the generic set. A task's target spec
# (``sapiens2_ft/tasks/<task>/targets.py``) names its pipeline and the defaults it changes.
PIPELINE_DEFAULTS = {
    SEG_PIPELINE: dict(_UPSTREAM, pipeline=SEG_PIPELINE, flip_prob=0.5, scale_range=(0.4, 2.0), crop_prob=0.3,
                       crop_max_class_ratio=0.75, rotate_prob=0.5, background_prob=0.8, blur_prob=0.3, noise_prob=0.3),
    CAMERA_PIPELINE: dict(_UPSTREAM, pipeline=CAMERA_PIPELINE, flip_prob=0.3, scale_range=(0.5, 2.0), scale_prob=0.3,
                          crop_prob=0.3, crop_area_range=(0.4, 1.0), crop_aspect_range=(0.5, 2.0), downup_prob=0.2,
                          blur_prob=0.3, noise_prob=0.3, solarize_prob=0.3),
    GENERIC_PIPELINE: dict(pipeline=GENERIC_PIPELINE, flip_prob=0.5, scale_range=(0.75, 1.5), photometric_prob=0.5,
                           blur_prob=0.1, dropout_prob=0.0),
}
_OPTIONAL = {"background_dir"}  # unset means a behaviour, not a default
_PROBS = ("flip_prob", "scale_prob", "crop_prob", "rotate_prob", "background_prob", "downup_prob",
          "photometric_prob", "blur_prob", "noise_prob", "solarize_prob", "dropout_prob")


def task_defaults(targets: TargetSpec | None) -> dict:
    """The augmentation defaults of a task: its pipeline's, with its target spec's changes (no task: the generic
    set)."""
    if targets is None:
        return PIPELINE_DEFAULTS[GENERIC_PIPELINE]
    return {**PIPELINE_DEFAULTS[targets.pipeline], **targets.augment}


def resolve_augment(augment: DenseAugment | dict, targets: TargetSpec | None = None) -> DenseAugment:
    """``augment`` with its unset fields filled from the defaults of the task of ``targets`` (None: the generic
    set), checked; every problem is reported in one ValueError naming the ``data.augment`` fields."""
    augment = DenseAugment(**augment) if isinstance(augment, dict) else augment
    base = task_defaults(targets)
    pipeline = augment.pipeline or base["pipeline"]
    errors = []
    if pipeline not in PIPELINE_FIT:
        raise ValueError(f"data.augment.pipeline must be one of {sorted(PIPELINE_FIT)}, got {pipeline!r}")
    if base["pipeline"] != pipeline:  # another pipeline than the task's own: that pipeline's defaults
        base = PIPELINE_DEFAULTS[pipeline]
    values = {}
    for field in fields(DenseAugment):
        value = getattr(augment, field.name)
        if value is not None and field.name not in base and field.name not in _OPTIONAL | {"pipeline"}:
            errors.append(f"{field.name} is not used by the {pipeline!r} pipeline (leave it unset)")
        values[field.name] = base.get(field.name) if value is None else value
    values["pipeline"] = pipeline
    if pipeline != SEG_PIPELINE and values["background_dir"] is not None:
        errors.append("background_dir is used by the 'seg' pipeline only")
    resolved = DenseAugment(**values)
    errors += _check_values(resolved)
    for name, why in (targets.fixed if targets is not None else {}).items():
        if getattr(resolved, name):
            errors.append(f"{name} must be 0 for task {targets.task!r}: {why}")
    if errors:
        raise ValueError("data.augment: " + "; ".join(errors))
    return resolved


def _check_values(a: DenseAugment) -> list[str]:
    errors = [f"{name} must be in [0, 1], got {getattr(a, name)}" for name in _PROBS
              if getattr(a, name) is not None and not 0.0 <= getattr(a, name) <= 1.0]
    for name, low_limit, high_limit in (("scale_range", 0.0, math.inf), ("downup_range", 0.0, 1.0),
                                        ("crop_area_range", 0.0, 1.0), ("crop_aspect_range", 0.0, math.inf)):
        value = getattr(a, name)
        if value is not None and not (len(value) == 2 and low_limit < value[0] <= value[1] <= high_limit):
            errors.append(f"{name} must be (low, high) with {low_limit} < low <= high <= {high_limit}, got {value}")
    if a.crop_max_class_ratio is not None and not 0.0 < a.crop_max_class_ratio <= 1.0:
        errors.append(f"crop_max_class_ratio must be in (0, 1], got {a.crop_max_class_ratio}")
    if a.rotate_degrees is not None and not 0.0 <= a.rotate_degrees <= 180.0:
        errors.append(f"rotate_degrees must be in [0, 180], got {a.rotate_degrees}")
    return errors


def validation_fit(augment: DenseAugment | None, targets: TargetSpec | None) -> str:
    """The validation resize matching the training pipeline (``letterbox`` or ``stretch``): that of ``augment``'s
    pipeline, else the task's (its ``TargetSpec.resize``)."""
    pipeline = augment.pipeline if augment is not None and augment.pipeline else task_defaults(targets)["pipeline"]
    return PIPELINE_FIT[pipeline]


def _translation(x: float, y: float) -> np.ndarray:
    return scale_offset_matrix(1.0, -x, -y)


def _image_ops(a: DenseAugment, rng: np.random.Generator, downup: bool = True) -> list:
    """The image-only ops drawn to happen, in order: down/up-sampling (unless ``downup`` is False), blur,
    noise, solarize."""
    drawn = [(rng.random() < a.downup_prob and downup, lambda im: down_up_sample(im, rng, a.downup_range)),
             (rng.random() < a.blur_prob, lambda im: gaussian_blur(im, rng)),
             (rng.random() < a.noise_prob, lambda im: gaussian_noise(im, rng)),
             (rng.random() < a.solarize_prob, solarize)]
    return [op for happens, op in drawn if happens]


class SegPipeline:
    """The upstream segmentation pipeline (module docstring) to ``input_size`` (H, W)."""

    def __init__(self, augment: DenseAugment, input_size: tuple[int, int], flip_table: np.ndarray | None,
                 maps: Mapping[str, MapRule] | None = None):
        self.a, self.size, self.flip_table, self.maps = augment, input_size, flip_table, maps or {}
        self.backgrounds = BackgroundSource(augment.background_dir) if augment.background_prob > 0 else None
        # The class ids its crops and new backgrounds follow (the foreground: classes other than 0), if any.
        self.classes = next((key for key, rule in self.maps.items() if rule.classes), None)

    def crop_offsets(self, shape: tuple[int, int], labels: np.ndarray | None,
                     rng: np.random.Generator) -> tuple[int, int]:
        """Top-left (y, x) of an input-sized window of an image of ``shape`` padded bottom / right to at least
        that size; with its resized ``labels`` (so padded, with 255) drawn again up to 10 times while it holds
        fewer than two classes or one with ``crop_max_class_ratio`` of its labelled pixels."""
        crop_h, crop_w = self.size
        height, width = max(shape[0], crop_h), max(shape[1], crop_w)

        def draw():
            return int(rng.integers(0, height - crop_h + 1)), int(rng.integers(0, width - crop_w + 1))

        y, x = draw()
        if labels is None or self.a.crop_max_class_ratio >= 1.0:
            return y, x
        for _ in range(10):
            counts = np.bincount(labels[y:y + crop_h, x:x + crop_w].ravel(), minlength=256)[:IGNORE_INDEX]
            counts = counts[counts > 0]
            if len(counts) > 1 and counts.max() / counts.sum() < self.a.crop_max_class_ratio:
                break
            y, x = draw()
        return y, x

    def __call__(self, sample: dict, rng: np.random.Generator) -> dict:
        a, size = self.a, self.size
        sample = dict(sample)
        foreground = sample.get(self.classes, sample.get(MASK))
        if rng.random() < a.background_prob and foreground is not None:
            height, width = sample["image"].shape[:2]
            sample["image"] = replace_background(sample["image"], foreground.astype(np.uint8),
                                                 self.backgrounds(rng, height, width))
        shape = sample["image"].shape[:2]
        ratio = rng.uniform(*a.scale_range) if rng.random() < a.scale_prob else 1.0
        scale = fit_scale(shape, (max(1, int(size[0] * ratio)), max(1, int(size[1] * ratio))))
        first = scale_offset_matrix(scale, 0.0, 0.0)
        canvas = (max(1, round(shape[0] * scale)), max(1, round(shape[1] * scale)))
        if rng.random() < a.crop_prob:
            labels = sample.get(self.classes)
            if labels is not None:
                labels = warp_nearest(labels, first, canvas, IGNORE_INDEX)
                labels = np.pad(labels, ((0, max(size[0] - canvas[0], 0)), (0, max(size[1] - canvas[1], 0))),
                                constant_values=IGNORE_INDEX)
            y, x = self.crop_offsets(canvas, labels, rng)
            first, canvas = compose(first, _translation(x, y)), size
        sample = warp_sample(sample, first, canvas, maps=self.maps)  # upstream resamples here (crop padding: 255)
        for op in _image_ops(a, rng):
            sample["image"] = op(sample["image"])
        angle = float(rng.uniform(-a.rotate_degrees, a.rotate_degrees)) if rng.random() < a.rotate_prob else 0.0
        second = compose(rotation_matrix(angle, canvas), stretch_matrix(canvas, size))
        out = warp_sample(sample, second, size, label_border=0, roll=angle, maps=self.maps)
        flip = rng.random() < a.flip_prob
        if rng.random() < a.photometric_prob:
            out["image"] = photometric_distortion(out["image"], rng)
        return _flipped(_dropout(out, a, rng), flip, self.flip_table, self.maps)


class CameraPipeline:
    """The upstream normal / pointmap pipeline (module docstring) to ``input_size`` (H, W)."""

    def __init__(self, augment: DenseAugment, input_size: tuple[int, int], flip_table: np.ndarray | None,
                 maps: Mapping[str, MapRule] | None = None):
        self.a, self.size, self.flip_table, self.maps = augment, input_size, flip_table, maps or {}

    def crop_window(self, shape: tuple[int, int], rng: np.random.Generator) -> tuple[int, int, int, int] | None:
        """(y, x, height, width) of a window of random area and aspect inside ``shape``; None after 8 misses."""
        height, width = shape
        for _ in range(8):
            aspect = rng.uniform(*self.a.crop_aspect_range)
            area = rng.uniform(*self.a.crop_area_range) * height * width
            crop_h, crop_w = math.sqrt(area / aspect), math.sqrt(area / aspect) * aspect
            if crop_w <= width and crop_h <= height:
                crop_h, crop_w = max(1, round(crop_h)), max(1, round(crop_w))
                return (int(rng.integers(0, height - crop_h + 1)), int(rng.integers(0, width - crop_w + 1)),
                        crop_h, crop_w)
        return None

    def __call__(self, sample: dict, rng: np.random.Generator) -> dict:
        a = self.a
        sample = dict(sample)
        if rng.random() < a.photometric_prob:
            sample["image"] = photometric_distortion(sample["image"], rng)
        if rng.random() < a.downup_prob:
            sample["image"] = down_up_sample(sample["image"], rng, a.downup_range)
        canvas = sample["image"].shape[:2]
        first, resampled = np.eye(3)[:2], False
        if rng.random() < a.scale_prob:
            scale = rng.uniform(*a.scale_range)
            first = scale_offset_matrix(scale, 0.0, 0.0)
            canvas, resampled = (max(1, round(canvas[0] * scale)), max(1, round(canvas[1] * scale))), True
        if rng.random() < a.crop_prob:
            window = self.crop_window(canvas, rng)
            if window is not None:
                first, canvas, resampled = compose(first, _translation(window[1], window[0])), window[2:], True
        if resampled:  # upstream resamples every map at this resolution before the final resize
            sample = warp_sample(sample, first, canvas, maps=self.maps)
        angle = float(rng.uniform(-a.rotate_degrees, a.rotate_degrees)) if rng.random() < a.rotate_prob else 0.0
        out = warp_sample(sample, compose(rotation_matrix(angle, canvas), letterbox_matrix(canvas, self.size)),
                          self.size, roll=angle, maps=self.maps)
        flip = rng.random() < a.flip_prob
        for op in _image_ops(a, rng, downup=False):
            out["image"] = op(out["image"])
        return _flipped(_dropout(out, a, rng), flip, self.flip_table, self.maps)


def _flipped(out: dict, flip: bool, flip_table, maps: Mapping[str, MapRule]) -> dict:
    """The flip drawn at its upstream place, applied last: the image ops after it are per-pixel, mirror-symmetric
    or (noise, dropout) drawn from mirror-symmetric distributions, so the samples are distributed as upstream's,
    and a flipped sample is the exact mirror of the unflipped one whatever OpenCV's code path on this CPU."""
    return flip_sample(out, flip_table, maps) if flip else out


def _dropout(out: dict, a: DenseAugment, rng: np.random.Generator) -> dict:
    if rng.random() < a.dropout_prob:
        out["image"] = coarse_dropout(out["image"], rng)
    return out


PIPELINES = {SEG_PIPELINE: SegPipeline, CAMERA_PIPELINE: CameraPipeline}
