"""How the data-check sheet (``tasks/sample_sheet.py``) draws one training sample and its targets, per task.

Each ``draw_*`` takes one item as the training loader yields it (tensors or arrays: ``image`` (3, H, W) and the
task's targets, see ``datamodules/pose_dataset.py`` and ``dense_dataset.py``), the data module's label set and a
display scale, and returns the sample's tiles. The task registry names each task's function
(``TaskSpec.draw_sample``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Sequence

import cv2
import numpy as np
import torch

from datamodules.dense_geometry import resize_nearest
from datamodules.keypoints.metainfo import KeypointMetainfo
from sapiens2_ft.models.preprocessing import IMAGE_MEAN, IMAGE_STD
from sapiens2_ft.tasks.visualize import depth_turbo, gray, label_overlay, normal_rgb

IGNORE_INDEX = 255  # seg labels drawn as the image (the data layer's ignore value)
CENTRE, LEFT, RIGHT = 0, 1, 2
SIDE_COLORS = {CENTRE: (60, 220, 60), LEFT: (40, 130, 255), RIGHT: (255, 120, 0)}  # RGB
SIDE_NAMES = {CENTRE: "centre", LEFT: "left", RIGHT: "right"}
_SIDE_WORDS = {"left": LEFT, "l": LEFT, "right": RIGHT, "r": RIGHT}


@dataclass(frozen=True)
class SheetLabels:
    """What drawing needs of the data module's label set: the keypoint set (pose), the class names (seg)."""

    metainfo: KeypointMetainfo | None = None
    class_names: tuple[str, ...] = ()


@dataclass
class SamplePicture:
    """One sample's tiles (RGB, equal heights) with their captions; ``classes``: seg classes it shows (for the
    legend); ``key``: (name, RGB colour) of the colours it uses (for the sheet's key)."""

    tiles: list[np.ndarray]
    titles: list[str]
    classes: set[int] = field(default_factory=set)
    key: tuple[tuple[str, tuple[int, int, int]], ...] = ()


def as_numpy(value) -> np.ndarray:
    """A tensor (any device, bf16 included) or array as a numpy array (floating values as float32)."""
    if isinstance(value, torch.Tensor):
        value = value.detach().cpu()
        return (value.float() if value.is_floating_point() else value).numpy()
    return np.asarray(value)


def display_image(image) -> np.ndarray:
    """An item's image (3, H, W) as RGB uint8 (H, W, 3): uint8 as the loaders yield it, or a float image
    normalised with ``models.preprocessing``'s mean and std, which is undone."""
    image = as_numpy(image)
    if image.dtype != np.uint8:
        mean, std = np.asarray(IMAGE_MEAN, np.float32), np.asarray(IMAGE_STD, np.float32)
        image = (image * std[:, None, None] + mean[:, None, None]).round().clip(0, 255).astype(np.uint8)
    return np.ascontiguousarray(image.transpose(1, 2, 0))


def scaled(picture: np.ndarray, factor: float, nearest: bool = False) -> np.ndarray:
    """``picture`` (H, W[, C]) at ``factor`` x its size: nearest-neighbour when enlarging or for ``nearest`` maps
    (labels, masks, normals: no values made up), area when shrinking an image."""
    if factor == 1:
        return picture
    size = (max(1, round(picture.shape[1] * factor)), max(1, round(picture.shape[0] * factor)))
    if factor > 1 or nearest:  # the data layer's gather: the same pixels on every CPU, any dtype
        return resize_nearest(picture, size[::-1])
    return cv2.resize(picture, size, interpolation=cv2.INTER_AREA)


def keypoint_sides(metainfo: KeypointMetainfo) -> np.ndarray:
    """(K,) side of each keypoint: a ``left``/``l`` or ``right``/``r`` word in its name (whatever the flip pairs
    say, so that a wrong pair shows); a flip pair whose names carry neither (``face-0`` / ``face-16``) gets left
    for its lower index, right for the other; the rest are centre."""
    sides = np.full(metainfo.num_keypoints, CENTRE)
    for k, (name, partner) in enumerate(zip(metainfo.keypoint_names, metainfo.flip_indices)):
        words = [_SIDE_WORDS[w] for w in re.split(r"[^a-z0-9]+", name.lower()) if w in _SIDE_WORDS]
        if words:
            sides[k] = words[0]
        elif partner != k:
            sides[k] = LEFT if k < partner else RIGHT
    return sides


def draw_sides(image: np.ndarray, points: np.ndarray, shown: np.ndarray, skeleton: Sequence[Sequence[int]],
               sides: np.ndarray) -> np.ndarray:
    """Skeleton links and filled joints coloured by side (links between two sides: centre colour)."""
    out = np.ascontiguousarray(image.copy())
    width = max(1, round(max(image.shape[:2]) / 256))
    at = [tuple(int(round(v)) for v in p) for p in points]
    for a, b in skeleton:
        if shown[a] and shown[b]:
            side = sides[a] if sides[a] == sides[b] else CENTRE
            cv2.line(out, at[a], at[b], SIDE_COLORS[side], width, cv2.LINE_AA)
    for k in np.flatnonzero(shown):
        cv2.circle(out, at[k], 2 * width + 2, (0, 0, 0), 1, cv2.LINE_AA)
        cv2.circle(out, at[k], 2 * width + 1, SIDE_COLORS[sides[k]], -1, cv2.LINE_AA)
    return out


def flipped_keypoints(points: np.ndarray, shown: np.ndarray, flip_indices: Sequence[int],
                      width: int) -> tuple[np.ndarray, np.ndarray]:
    """The keypoints of the horizontally mirrored crop: x -> (W - 1) - x (the crop's own flip, as in
    ``datamodules/transforms/affine.hflip_matrix``), rows swapped by the set's flip pairs."""
    flip = np.asarray(flip_indices)
    mirrored = points[flip].copy()
    mirrored[:, 0] = (width - 1) - mirrored[:, 0]
    return mirrored, shown[flip]


def _caption(item: dict) -> str:
    if "name" in item:
        return str(item["name"])
    if "image_id" in item:
        return f"image {int(as_numpy(item['image_id']))}"
    return ""


def draw_pose(item: dict, labels: SheetLabels, factor: float) -> SamplePicture:
    """The crop with its keypoints and skeleton coloured left / right, and its mirror image with the keypoints
    flipped by the set's flip pairs: where the pairs are right, the left colour stays on the figure's left (the
    same side of the picture as in the crop); a swapped or missing pair changes sides."""
    metainfo = labels.metainfo
    if metainfo is None:
        raise ValueError("the pose data sheet needs the data module's keypoint set (its `metainfo`)")
    image = display_image(item["image"])
    points = as_numpy(item["keypoints"]).astype(np.float64)
    shown = as_numpy(item["keypoint_weights"]) > 0
    mirrored, mirrored_shown = flipped_keypoints(points, shown, metainfo.flip_indices, image.shape[1])
    sides = keypoint_sides(metainfo)

    def drawn(picture, at, visible):  # drawn after scaling: lines stay thin and sharp
        return draw_sides(scaled(picture, factor), (at + 0.5) * factor - 0.5, visible, metainfo.skeleton, sides)

    tiles = [drawn(image, points, shown), drawn(image[:, ::-1], mirrored, mirrored_shown)]
    key = tuple((SIDE_NAMES[s], SIDE_COLORS[s]) for s in (LEFT, RIGHT, CENTRE) if (sides == s).any())
    return SamplePicture(tiles, [_caption(item), "flipped"], key=key)


# Dense targets are scaled to the sheet first (nearest-neighbour) and drawn there: drawing 1024x768 maps and
# shrinking the pictures afterwards costs seconds per sheet.

def _image(item: dict, factor: float) -> np.ndarray:
    return scaled(display_image(item["image"]), factor)


def _map(item: dict, key: str, factor: float) -> np.ndarray:
    """Target ``key`` as (H, W) or (H, W, C) (channels last) at the sheet's scale."""
    value = as_numpy(item[key])
    if key == "mask":
        value = value.reshape(as_numpy(item["image"]).shape[1:]).astype(bool)
    elif value.ndim == 3:
        value = value.transpose(1, 2, 0)
        value = value[..., 0] if value.shape[-1] == 1 else value
    return scaled(np.ascontiguousarray(value), factor, nearest=True)


def _picture(item: dict, image: np.ndarray, target: np.ndarray, title: str, **kwargs) -> SamplePicture:
    return SamplePicture([image, target], [_caption(item), title], **kwargs)


def draw_seg(item: dict, labels: SheetLabels, factor: float) -> SamplePicture:
    """The image and its class colours (background and ignored pixels show the image)."""
    classes = _map(item, "labels", factor).astype(np.int64)
    largest = int(classes[classes != IGNORE_INDEX].max(initial=0))
    names = labels.class_names or tuple(str(c) for c in range(largest + 1))  # ids when the set has no names
    image = _image(item, factor)
    overlay = label_overlay(image, classes, len(names), ignore_index=IGNORE_INDEX)
    present = {int(c) for c in np.unique(as_numpy(item["labels"])) if 0 < c < len(names)}
    return _picture(item, image, overlay, "labels", classes=present)


def draw_normal(item: dict, labels: SheetLabels, factor: float) -> SamplePicture:
    """The image and its normals as RGB ((n + 1) / 2; pixels outside the mask black)."""
    normals = normal_rgb(_map(item, "normals", factor), _map(item, "mask", factor))
    return _picture(item, _image(item, factor), normals, "normals")


def draw_pointmap(item: dict, labels: SheetLabels, factor: float) -> SamplePicture:
    """The image and its depth (the pointmap's z) as turbo, near = red, over the mask."""
    depth = depth_turbo(_map(item, "pointmap", factor)[..., 2], _map(item, "mask", factor))
    return _picture(item, _image(item, factor), depth, "depth (z)")


def draw_matting(item: dict, labels: SheetLabels, factor: float) -> SamplePicture:
    """The image and its alpha matte (white = 1)."""
    return _picture(item, _image(item, factor), gray(_map(item, "alpha", factor)), "alpha")
