"""Dense-task geometry and augmentation: scale + crop/letterbox, horizontal flip, intrinsics, pointmaps.

A sample is a dict of numpy arrays: ``image`` HxWx3 uint8 plus any of ``labels`` HxW uint8,
``normals`` HxWx3, ``mask`` HxW bool, ``depth`` HxW, ``pointmap`` HxWx3, ``K`` 3x3, ``alpha`` HxW,
``foreground`` HxWx3 (floats are float32). Every geometric step moves all of them together:

- resize/crop/pad is one affine ``A`` (source -> output pixel centres, cv2.warpAffine convention);
  labels / mask / depth / pointmap use nearest (never bilinear), normals linear then renormalised,
  image / alpha / foreground linear; ``K' = [A; 0 0 1] @ K`` (fx, fy scale; cx, cy scale + shift).
- horizontal flip (after the warp): labels through the ``flip_classes`` map, normals n_x negated,
  pointmap X negated, ``cx' = W - 1 - cx``; depth / mask / alpha / foreground only mirrored.
Padding: labels 255 (ignore), mask False, depth / pointmap / alpha / foreground / image 0.
Photometric changes (albumentations) touch the image only.
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np

from datamodules.synthetic.parts import SAPIENS2_PART_CLASSES
from datamodules.transforms.photometric import photometric_pipeline

CANONICAL_FOCAL = 768.0
IGNORE_INDEX = 255


@dataclass
class DenseAugment:
    """Training augmentation of dense samples.

    Args:
        flip_prob: Horizontal flip (left/right classes swapped, n_x / X negated, cx mirrored).
        scale_range: Random scale multiplier of the letterbox fit; > 1 crops, < 1 pads.
        photometric_prob: Brightness / contrast / hue / saturation distortion (image only).
        blur_prob: Gaussian or median blur (image only).
        dropout_prob: Coarse dropout of one image rectangle (targets untouched).
    """

    flip_prob: float = 0.5
    scale_range: tuple[float, float] = (0.75, 1.5)
    photometric_prob: float = 0.5
    blur_prob: float = 0.1
    dropout_prob: float = 0.0


def flip_classes_from_names(class_names) -> list[int]:
    """Index map swapping ``Left_*`` / ``Right_*`` (any case, ``_`` / space / ``-`` after) class names."""
    def key(name: str) -> tuple[str, str] | None:
        low = name.lower()
        for side in ("left", "right"):
            if low.startswith(side) and low[len(side):len(side) + 1] in ("_", " ", "-"):
                return side, low[len(side) + 1:]
        return None

    index = {key(n): i for i, n in enumerate(class_names) if key(n)}
    mapping = list(range(len(class_names)))
    for (side, part), i in index.items():
        other = index.get(("right" if side == "left" else "left", part))
        if other is not None:
            mapping[i] = other
    return mapping


SAPIENS2_FLIP_CLASSES = flip_classes_from_names(SAPIENS2_PART_CLASSES)  # 5-12 <-> 14-21


def check_flip_classes(flip_classes, num_classes: int) -> np.ndarray:
    """uint8 lookup table (256 entries, 255 kept) from an index map that must be a permutation."""
    mapping = np.asarray(flip_classes, dtype=np.int64)
    if mapping.shape != (num_classes,) or sorted(mapping.tolist()) != list(range(num_classes)):
        raise ValueError(f"dense_transforms.py: flip_classes must be a permutation of range({num_classes}), "
                         f"got {list(flip_classes)}")
    table = np.arange(256, dtype=np.uint8)
    table[:num_classes] = mapping
    return table


def scale_offset_matrix(scale: float, offset_x: float, offset_y: float) -> np.ndarray:
    """2x3 affine of ``edge' = scale * edge + offset`` (edge coords: pixel centre + 0.5) on pixel centres."""
    shift = 0.5 * (scale - 1.0)
    return np.array([[scale, 0.0, offset_x + shift], [0.0, scale, offset_y + shift]])


def update_intrinsics(K: np.ndarray, matrix: np.ndarray) -> np.ndarray:
    """K after the image is warped by the 2x3 pixel affine ``matrix``."""
    return (np.vstack([matrix, [0.0, 0.0, 1.0]]) @ K.astype(np.float64)).astype(np.float32)


def flip_intrinsics(K: np.ndarray, width: int) -> np.ndarray:
    """K after a horizontal flip of a ``width``-pixel image: cx' = W - 1 - cx (fx kept positive)."""
    K = K.copy()
    K[0, 2] = width - 1 - K[0, 2]
    return K


def back_project(depth: np.ndarray, K: np.ndarray) -> np.ndarray:
    """HxW z-depth -> HxWx3 float32 camera XYZ at pixel centres (u = column, v = row)."""
    height, width = depth.shape
    u, v = np.meshgrid(np.arange(width, dtype=np.float64), np.arange(height, dtype=np.float64))
    x = (u - K[0, 2]) / K[0, 0] * depth
    y = (v - K[1, 2]) / K[1, 1] * depth
    return np.stack([x, y, depth.astype(np.float64)], axis=-1).astype(np.float32)


def canonical_pointmap(depth: np.ndarray, K: np.ndarray, canonical_focal: float = CANONICAL_FOCAL):
    """Camera XYZ re-expressed for a camera of focal ``canonical_focal``; returns ``(xyz, scale)``.

    ``scale = canonical_focal / fx``. Convention: X and Y are kept and Z is multiplied by ``scale``,
    so projecting the canonical points with focal ``canonical_focal`` (and the same cx, cy) lands on
    the same pixels: ``canonical_focal * X / (scale * Z) = fx * X / Z``. (For fy != fx the v axis
    projects with ``canonical_focal * fy / fx``.) Metric points back: ``Z = Z_canonical / scale``.
    ``depth`` may also be an HxWx3 camera pointmap (then only its Z is rescaled).
    """
    xyz = back_project(depth, K) if depth.ndim == 2 else depth.astype(np.float32).copy()
    scale = float(canonical_focal) / float(K[0, 0])
    xyz[..., 2] *= scale
    return xyz, scale


def warp_sample(sample: dict, matrix: np.ndarray, size: tuple[int, int], antialias: bool = True) -> dict:
    """Warp every map of ``sample`` by the 2x3 pixel affine ``matrix`` to ``size`` (H, W)."""
    dsize = (int(size[1]), int(size[0]))

    def warp(array, interpolation, border=0):
        return cv2.warpAffine(array, matrix, dsize, flags=interpolation, borderMode=cv2.BORDER_CONSTANT,
                              borderValue=border)

    out = {}
    scale = float(abs(matrix[0, 0]))
    for key, value in sample.items():
        if key == "image":
            if antialias and scale < 0.5:  # prefilter a strong downscale (warpAffine has no INTER_AREA)
                value = cv2.GaussianBlur(value, (0, 0), sigmaX=(1.0 / scale - 1.0) / 2.0)
            out[key] = warp(value, cv2.INTER_LINEAR)
        elif key == "labels":
            out[key] = warp(value, cv2.INTER_NEAREST, IGNORE_INDEX)
        elif key == "mask":
            out[key] = warp(value.astype(np.uint8), cv2.INTER_NEAREST) > 0
        elif key in ("depth", "pointmap"):
            out[key] = warp(value, cv2.INTER_NEAREST)
        elif key in ("alpha", "foreground"):
            out[key] = warp(value, cv2.INTER_LINEAR)
        elif key == "normals":
            out[key] = warp(value, cv2.INTER_LINEAR)
        elif key == "K":
            out[key] = update_intrinsics(value, matrix)
        else:
            out[key] = value
    if "normals" in out:
        normals = out["normals"]
        norm = np.linalg.norm(normals, axis=-1, keepdims=True)
        valid = norm[..., 0] > 0.5  # blends of opposite normals or with unlabelled pixels are dropped
        out["normals"] = np.where(valid[..., None], normals / np.maximum(norm, 1e-6), 0).astype(np.float32)
        if "mask" in out:
            out["mask"] = out["mask"] & valid
    if "mask" in out and "depth" in out:
        out["mask"] = out["mask"] & (out["depth"] > 0)
    if "mask" in out and "pointmap" in out:
        out["mask"] = out["mask"] & (out["pointmap"][..., 2] > 0)
    return out


def flip_sample(sample: dict, flip_table: np.ndarray | None = None) -> dict:
    """Horizontal flip with the per-target rules (see the module docstring)."""
    out = {}
    for key, value in sample.items():
        if key == "K":
            out[key] = flip_intrinsics(value, sample["image"].shape[1])
            continue
        if not isinstance(value, np.ndarray) or value.ndim < 2:
            out[key] = value
            continue
        value = np.ascontiguousarray(value[:, ::-1])
        if key == "labels" and flip_table is not None:
            value = flip_table[value]
        elif key in ("normals", "pointmap"):
            value = value.copy()
            value[..., 0] *= -1
        out[key] = value
    return out


def fit_scale(shape: tuple[int, int], size: tuple[int, int]) -> float:
    """Largest scale that fits an image of ``shape`` (H, W) inside ``size`` (H, W)."""
    return min(size[0] / shape[0], size[1] / shape[1])


class DenseTransform:
    """Training (``augment`` set) or validation (deterministic letterbox) transform to ``input_size`` (H, W).

    Random draws happen in a fixed order (scale, offsets, flip) whatever their outcome, so two calls
    with equally seeded generators differing only in ``flip_prob`` give mirror images.
    """

    def __init__(self, input_size: tuple[int, int], augment: DenseAugment | None = None,
                 flip_classes=None, num_classes: int = len(SAPIENS2_PART_CLASSES)):
        self.input_size = (int(input_size[0]), int(input_size[1]))
        self.augment = augment
        flip_classes = SAPIENS2_FLIP_CLASSES if flip_classes is None and num_classes == 29 else flip_classes
        self.flip_table = (check_flip_classes(flip_classes, num_classes) if flip_classes is not None
                           else None)
        self.photometric = (photometric_pipeline(augment.photometric_prob, augment.blur_prob, augment.dropout_prob)
                            if augment else None)

    def matrix(self, shape: tuple[int, int], rng: np.random.Generator | None) -> np.ndarray:
        """Pixel affine: scale (random when augmenting) then random crop / pad or centred letterbox."""
        out_h, out_w = self.input_size
        scale = fit_scale(shape, self.input_size)
        if rng is None or self.augment is None:
            return scale_offset_matrix(scale, (out_w - shape[1] * scale) / 2, (out_h - shape[0] * scale) / 2)
        low, high = self.augment.scale_range
        scale *= rng.uniform(low, high)
        offsets = []
        for out, side in ((out_w, shape[1] * scale), (out_h, shape[0] * scale)):
            spare = out - side  # < 0: crop, > 0: pad
            offsets.append(rng.uniform(min(0.0, spare), max(0.0, spare)))
        return scale_offset_matrix(scale, *offsets)

    def __call__(self, sample: dict, rng: np.random.Generator | None = None) -> dict:
        out = warp_sample(sample, self.matrix(sample["image"].shape[:2], rng), self.input_size)
        if rng is not None and self.augment is not None:
            if rng.random() < self.augment.flip_prob:
                out = flip_sample(out, self.flip_table)
            if self.photometric is not None:
                self.photometric.set_random_seed(int(rng.integers(2**31)))
                out["image"] = self.photometric(image=out["image"])["image"]
        return out
