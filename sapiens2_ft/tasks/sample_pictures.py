"""What the data-check sheet (``tasks/sample_sheet.py``) needs to draw one training sample: the label set, the
cell's tiles, and the item's image and maps at the sheet's scale.

Each task draws its own cell (``tasks/<task>/draw.py``: ``draw_sample``, named by ``TaskSpec.data.draw_sample``) from
one item as the training loader yields it (tensors or arrays: ``image`` (3, H, W) and the task's targets, see
``datamodules/pose_dataset.py`` and ``dense_dataset.py``), with the task's one drawing of its maps.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import cv2
import numpy as np
import torch

from datamodules.dense.geometry import resize_nearest
from datamodules.keypoints.metainfo import KeypointMetainfo
from sapiens2_ft.models.preprocessing import IMAGE_MEAN, IMAGE_STD


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


def caption(item: dict) -> str:
    """The sample's name (dense) or image id (pose), as its first tile's caption."""
    if "name" in item:
        return str(item["name"])
    if "image_id" in item:
        return f"image {int(as_numpy(item['image_id']))}"
    return ""


# Dense targets are scaled to the sheet first (nearest-neighbour) and drawn there: drawing 1024x768 maps and
# shrinking the pictures afterwards costs seconds per sheet.

def sheet_image(item: dict, factor: float) -> np.ndarray:
    """The item's image as RGB at the sheet's scale."""
    return scaled(display_image(item["image"]), factor)


def sheet_map(item: dict, key: str, factor: float) -> np.ndarray:
    """Target ``key`` as (H, W) or (H, W, C) (channels last) at the sheet's scale (``mask`` as bool)."""
    value = as_numpy(item[key])
    if key == "mask":
        value = value.reshape(as_numpy(item["image"]).shape[1:]).astype(bool)
    elif value.ndim == 3:
        value = value.transpose(1, 2, 0)
        value = value[..., 0] if value.shape[-1] == 1 else value
    return scaled(np.ascontiguousarray(value), factor, nearest=True)


def image_and_target(item: dict, factor: float, target: np.ndarray, title: str, **kwargs) -> SamplePicture:
    """The usual dense cell: the item's image, then its drawn ``target`` captioned ``title``."""
    return SamplePicture([sheet_image(item, factor), target], [caption(item), title], **kwargs)
