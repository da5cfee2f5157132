"""Dense-task geometry: affine warps (scale, crop / letterbox, stretch, rotation), horizontal flip, intrinsics,
pointmaps. ``dense.transforms.DenseTransform`` applies them (a training pipeline or the validation resize).

A sample is a dict of numpy arrays: ``image`` HxWx3 uint8, optionally ``mask`` HxW bool (the pixels whose
targets are known) and ``K`` 3x3 intrinsics, plus the maps of a task, each moved by the rule its target spec
declares (``dense.maps.MapRule``; floats are float32). Every geometric step moves all of them together:

- resize/crop/pad/rotate is one affine ``A`` (source -> output pixel centres, cv2.warpAffine convention); the
  image and ``linear`` maps blend, the mask and ``nearest`` maps (ids, depths, points: never bilinear) keep their
  values; ``K' = [A; 0 0 1] @ K`` (fx, fy scale; cx, cy scale + shift). Unit-vector maps are renormalised after the
  warp, and a map's ``valid`` pixels narrow the mask.
  Nearest warps are this module's own gather (``warp_nearest``: one rounding rule, the same on every CPU);
  OpenCV's INTER_NEAREST picks other pixels on its IPP, SIMD and plain paths. Linear warps are OpenCV's
  (its paths agree within 1 grey level on uint8 images, ``tests/data/test_cpu_paths.py``).
  A rotation (``roll``) also turns unit vectors' (x, y) by the same angle; samples with intrinsics are not rotated.
- horizontal flip (after the warp): class ids through the ``flip_classes`` map, vectors' x negated,
  ``cx' = W - 1 - cx``; the rest only mirrored.
Padding: class ids 255 (ignore; a rotation's corners may use 0), mask False, the image and other maps 0. Colour
changes of the image also change the maps of its colours (``MapRule.colour``, so that an image stays
``alpha x foreground + (1 - alpha) x background``); blur, noise and dropout touch the image only.
"""

from __future__ import annotations

from typing import Mapping

import cv2
import numpy as np

from datamodules.body_parts import SAPIENS2_PART_CLASSES
from datamodules.dense.maps import MapRule

CANONICAL_FOCAL = 768.0
IGNORE_INDEX = 255


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
        raise ValueError(f"dense/geometry.py: flip_classes must be a permutation of range({num_classes}), "
                         f"got {list(flip_classes)}")
    table = np.arange(256, dtype=np.uint8)
    table[:num_classes] = mapping
    return table


def scale_offset_matrix(scale: float, offset_x: float, offset_y: float) -> np.ndarray:
    """2x3 affine of ``edge' = scale * edge + offset`` (edge coords: pixel centre + 0.5) on pixel centres."""
    shift = 0.5 * (scale - 1.0)
    return np.array([[scale, 0.0, offset_x + shift], [0.0, scale, offset_y + shift]])


def stretch_matrix(shape: tuple[int, int], size: tuple[int, int]) -> np.ndarray:
    """2x3 affine stretching an image of ``shape`` (H, W) to fill ``size`` (H, W) (aspect not kept)."""
    sx, sy = size[1] / shape[1], size[0] / shape[0]
    return np.array([[sx, 0.0, 0.5 * (sx - 1.0)], [0.0, sy, 0.5 * (sy - 1.0)]])


def rotation_matrix(degrees: float, shape: tuple[int, int]) -> np.ndarray:
    """2x3 affine turning an image of ``shape`` (H, W) by ``degrees`` about its centre, counter-clockwise as
    displayed (the cv2.getRotationMatrix2D convention)."""
    return cv2.getRotationMatrix2D(((shape[1] - 1) / 2.0, (shape[0] - 1) / 2.0), float(degrees), 1.0)


def compose(*matrices: np.ndarray) -> np.ndarray:
    """2x3 affine of applying ``matrices`` in order (the first one first)."""
    total = np.eye(3)
    for matrix in matrices:
        total = np.vstack([matrix, [0.0, 0.0, 1.0]]) @ total
    return total[:2]


def rotate_normals(normals: np.ndarray, degrees: float) -> np.ndarray:
    """Normals after the image turns by ``degrees`` (``rotation_matrix`` convention): (n_x, n_y) turn with the
    image content (a camera roll), n_z is kept."""
    c, s = np.cos(np.deg2rad(degrees)), np.sin(np.deg2rad(degrees))
    out = normals.copy()
    out[..., 0] = c * normals[..., 0] + s * normals[..., 1]
    out[..., 1] = -s * normals[..., 0] + c * normals[..., 1]
    return out


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
    """Camera XYZ in the canonical camera of focal ``canonical_focal``, as upstream; returns ``(xyz, scale)``.

    ``scale = canonical_focal / fx``; X, Y and Z are all multiplied by it (the scene shrinks or grows about
    the camera centre, so X/Z and Y/Z are kept and every point still projects to its pixel through K).
    Metric points back: ``xyz / scale``. ``depth`` may also be an HxWx3 camera pointmap.
    """
    xyz = back_project(depth, K) if depth.ndim == 2 else depth.astype(np.float32)
    scale = float(canonical_focal) / float(K[0, 0])
    return (xyz * scale).astype(np.float32), scale


def inverse_affine(matrix: np.ndarray) -> tuple[float, ...]:
    """``(a, b, c, d, e, f)`` of the inverse of the 2x3 affine ``matrix``, in closed form on Python floats
    (IEEE double, no LAPACK: the same bits on every CPU)."""
    (a, b, c), (d, e, f) = (tuple(float(v) for v in row) for row in np.asarray(matrix, dtype=np.float64))
    det = a * e - b * d
    if det == 0.0:
        raise ValueError(f"dense/geometry.py: the affine {np.asarray(matrix).tolist()} cannot be inverted")
    ia, ib, id_, ie = e / det, -b / det, -d / det, a / det
    return ia, ib, -(ia * c + ib * f), id_, ie, -(id_ * c + ie * f)


class NearestWarp:
    """The nearest-neighbour warp by the 2x3 ``matrix`` (source -> output pixel centres) from an image of
    ``shape`` (H, W) to ``size`` (H, W), its source pixels computed once for every map warped with it.

    The rule: the output centre (x, y) maps back to (u, v) = A^-1 (x, y) in float64, evaluated as
    ``u = ia x + (ib y + ic + 0.5)`` (likewise v), and its source pixel is ``(floor(v), floor(u))`` after that
    +0.5: the nearest source centre, a tie going to the larger index. Outside the source: the border value.
    A warp without rotation or shear (scale, crop, pad, stretch) gathers rows then columns.
    """

    def __init__(self, matrix: np.ndarray, size: tuple[int, int], shape: tuple[int, int]):
        ia, ib, ic, id_, ie, if_ = inverse_affine(matrix)
        self.shape, self.size = (int(shape[0]), int(shape[1])), (int(size[0]), int(size[1]))
        xs = np.arange(self.size[1], dtype=np.float64)
        ys = np.arange(self.size[0], dtype=np.float64)
        height, width = self.shape
        self.separable = ib == 0.0 and id_ == 0.0
        if self.separable:
            cols, rows = np.floor(ia * xs + (ic + 0.5)), np.floor(ie * ys + (if_ + 0.5))
            self.cols_inside, self.rows_inside = (cols >= 0) & (cols < width), (rows >= 0) & (rows < height)
            self.cols = np.clip(cols, 0, width - 1).astype(np.intp)
            self.rows = np.clip(rows, 0, height - 1).astype(np.intp)
            return
        cols = np.floor(ia * xs[None, :] + (ib * ys[:, None] + ic + 0.5))
        rows = np.floor(id_ * xs[None, :] + (ie * ys[:, None] + if_ + 0.5))
        self.inside = (cols >= 0) & (cols < width) & (rows >= 0) & (rows < height)
        self.index = np.clip(rows, 0, height - 1).astype(np.intp) * width + np.clip(cols, 0, width - 1).astype(np.intp)

    def __call__(self, array: np.ndarray, border=0) -> np.ndarray:
        """``array`` (H, W[, C], any dtype) warped; ``border`` outside the source."""
        if array.shape[:2] != self.shape:
            raise ValueError(f"dense/geometry.py: a map of {array.shape[:2]} in a warp of {self.shape} images")
        if self.separable:
            out = np.take(np.take(array, self.rows, axis=0), self.cols, axis=1)
            out[~self.rows_inside] = border
            out[:, ~self.cols_inside] = border
            return out
        out = array.reshape(self.shape[0] * self.shape[1], *array.shape[2:])[self.index]
        out[~self.inside] = border
        return out


def warp_nearest(array: np.ndarray, matrix: np.ndarray, size: tuple[int, int], border=0) -> np.ndarray:
    """``array`` (H, W[, C], any dtype) warped by the 2x3 ``matrix`` to ``size`` (H, W) with the nearest source
    pixel (``NearestWarp``'s rule); outside the source: ``border``."""
    return NearestWarp(matrix, size, array.shape[:2])(array, border)


def resize_nearest(array: np.ndarray, size: tuple[int, int]) -> np.ndarray:
    """``array`` (H, W[, C]) stretched to ``size`` (H, W) with ``warp_nearest`` (pictures of labels and masks)."""
    return warp_nearest(array, stretch_matrix(array.shape[:2], size), size)


# The entries every sample may have, warped by this module's own rules; a task's maps follow their MapRule.
IMAGE, MASK, INTRINSICS = "image", "mask", "K"
MAP_WARPS = {"linear": cv2.INTER_LINEAR, "nearest": cv2.INTER_NEAREST}  # ``MapRule.warp``


def warp_sample(sample: dict, matrix: np.ndarray, size: tuple[int, int], antialias: bool = True,
                label_border: int = IGNORE_INDEX, roll: float = 0.0,
                maps: Mapping[str, MapRule] | None = None) -> dict:
    """Warp every map of ``sample`` by the 2x3 pixel affine ``matrix`` to ``size`` (H, W).

    ``label_border``: class id of pixels from outside the source. ``roll``: degrees of rotation contained in
    ``matrix`` (``rotation_matrix`` convention); unit vectors turn by it. A sample with intrinsics ``K`` cannot
    be rotated (upstream never rotates pointmaps; it would be a camera roll about the principal point only).
    ``maps``: how each of the task's maps moves (its ``TargetSpec.maps``).
    """
    maps = dict(maps or {})
    unknown = {kind: rule.warp for kind, rule in maps.items() if rule.warp not in MAP_WARPS}
    if unknown:
        raise ValueError(f"dense/geometry.py: unknown warps {unknown} of the target spec's maps; one of "
                         f"{', '.join(MAP_WARPS)}")
    if roll and INTRINSICS in sample:
        raise ValueError("dense/geometry.py: samples with intrinsics (pointmaps) are not rotated; set "
                         "data.augment.rotate_prob to 0")
    dsize = (int(size[1]), int(size[0]))

    nearest = []  # the NearestWarp, made at the first nearest map and shared by the others

    def warp(array, interpolation, border=0):
        if interpolation == cv2.INTER_NEAREST:
            nearest or nearest.append(NearestWarp(matrix, size, array.shape[:2]))
            return nearest[0](array, border)
        return cv2.warpAffine(array, matrix, dsize, flags=interpolation, borderMode=cv2.BORDER_CONSTANT,
                              borderValue=border)

    out = {}
    image_hw = sample[IMAGE].shape[:2] if IMAGE in sample else None
    scale = float(np.linalg.svd(np.asarray(matrix)[:, :2], compute_uv=False).min())  # the strongest shrink
    for key, value in sample.items():
        if key == IMAGE:
            if antialias and scale < 0.5:  # prefilter a strong downscale (warpAffine has no INTER_AREA)
                value = cv2.GaussianBlur(value, (0, 0), sigmaX=(1.0 / scale - 1.0) / 2.0)
            out[key] = warp(value, cv2.INTER_LINEAR)
        elif key == MASK:
            out[key] = warp(value.astype(bool), cv2.INTER_NEAREST, False)
        elif key == INTRINSICS:
            out[key] = update_intrinsics(value, matrix)
        elif key in maps:
            rule = maps[key]
            value = rotate_normals(value, roll) if rule.unit and roll else value
            out[key] = warp(value, MAP_WARPS[rule.warp], label_border if rule.classes else 0)
        elif isinstance(value, np.ndarray) and value.ndim >= 2 and value.shape[:2] == image_hw:
            # A map of the image's size left as it is would no longer line up with the warped image.
            raise ValueError(f"dense/geometry.py: no warp rule for the map '{key}' {value.shape}; the maps it "
                             f"warps: {', '.join([IMAGE, MASK, *maps])} (a new kind: declare its rule in its target "
                             f"spec's maps)")
        else:
            out[key] = value
    for key, rule in maps.items():
        if key not in out:
            continue
        if rule.unit:
            vectors = out[key]
            norm = np.linalg.norm(vectors, axis=-1, keepdims=True)
            valid = norm[..., 0] > 0.5  # blends of opposite vectors or with unlabelled pixels are dropped
            out[key] = np.where(valid[..., None], vectors / np.maximum(norm, 1e-6), 0).astype(np.float32)
            if MASK in out:
                out[MASK] = out[MASK] & valid
        if rule.valid is not None and MASK in out:
            out[MASK] = out[MASK] & rule.valid(out[key])
    return out


def flip_sample(sample: dict, flip_table: np.ndarray | None = None, maps: Mapping[str, MapRule] | None = None) -> dict:
    """Horizontal flip with the per-map rules (see the module docstring; ``maps``: the task's ``MapRule``s)."""
    maps = maps or {}
    out = {}
    for key, value in sample.items():
        if key == INTRINSICS:
            out[key] = flip_intrinsics(value, sample[IMAGE].shape[1])
            continue
        if not isinstance(value, np.ndarray) or value.ndim < 2:
            out[key] = value
            continue
        value = np.ascontiguousarray(value[:, ::-1])
        rule = maps.get(key)
        if rule is not None and rule.classes and flip_table is not None:
            value = flip_table[value]
        elif rule is not None and rule.vector:
            value = value.copy()
            value[..., 0] *= -1
        out[key] = value
    return out


def fit_scale(shape: tuple[int, int], size: tuple[int, int]) -> float:
    """Largest scale that fits an image of ``shape`` (H, W) inside ``size`` (H, W)."""
    return min(size[0] / shape[0], size[1] / shape[1])


def letterbox_matrix(shape: tuple[int, int], size: tuple[int, int]) -> np.ndarray:
    """2x3 affine fitting an image of ``shape`` (H, W) inside ``size`` (H, W), aspect kept, centred."""
    scale = fit_scale(shape, size)
    return scale_offset_matrix(scale, (size[1] - shape[1] * scale) / 2, (size[0] - shape[0] * scale) / 2)
