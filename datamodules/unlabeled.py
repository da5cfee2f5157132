"""Images nobody labelled, for training with a teacher (``data.unlabeled``): each training sample brings one.

The folder is read through the boundary (``boundary.folders.images_under``: its links are not followed;
``boundary.images.read_image``: the pixel limit from the header and the decoded image). Each image is fitted to the
input size as the task's data module says (pose: the whole image as the person box, with the crop's aspect; dense
tasks: the validation resize), with a random horizontal flip. :class:`WithUnlabeled` adds one such image to each
item of the training set as ``unlabeled`` (3, H, W) uint8, drawn from the sample's own generator, so the batch keeps
its keys and the loaders, mixes, shards and mid-epoch resume work unchanged.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Callable

import numpy as np
import torch
from torch.utils.data import Dataset

from datamodules.boundary.folders import images_under
from datamodules.boundary.images import read_image
from datamodules.errors import DataError
from datamodules.loaders import sample_rng
from datamodules.transforms import affine

Fit = Callable[[tuple[int, int]], np.ndarray]  # image (H, W) -> the 2x3 matrix into the network input


def list_unlabeled(folder: str | Path) -> list[Path]:
    """The images of ``data.unlabeled`` (``DataError`` when it is no folder or holds none)."""
    try:
        names = images_under(Path(folder))
    except NotADirectoryError as err:
        raise DataError(f"data.unlabeled: {err}") from None
    if not names:
        raise DataError(f"data.unlabeled: no images in {folder} (symbolic links are not followed)")
    return [Path(folder) / name for name in names]


class UnlabeledImages(Dataset):
    """``paths`` fitted to ``input_size`` (H, W) by ``fit``; flipped at random with ``flip_prob``."""

    def __init__(self, paths: list[Path], input_size: tuple[int, int], fit: Fit, flip_prob: float = 0.5):
        self.paths, self.input_size, self.fit, self.flip_prob = [str(p) for p in paths], tuple(input_size), fit, flip_prob

    def __len__(self) -> int:
        return len(self.paths)

    def image(self, index: int, rng: np.random.Generator | None) -> torch.Tensor:
        image = read_image(self.paths[index])
        matrix = self.fit(image.shape[:2])
        if rng is not None and rng.random() < self.flip_prob:
            matrix = affine.compose(affine.hflip_matrix(self.input_size[1]), matrix)
        crop = affine.warp_image(image, matrix, self.input_size, affine.crop_interpolation(matrix))
        return torch.from_numpy(np.ascontiguousarray(crop.transpose(2, 0, 1)))


class WithUnlabeled(Dataset):
    """``dataset``'s items, each with ``unlabeled``: an image of ``unlabeled`` drawn by the item's generator (a plain
    index: the image at that index, cycling)."""

    def __init__(self, dataset: Dataset, unlabeled: UnlabeledImages):
        self.dataset, self.unlabeled = dataset, unlabeled

    def __len__(self) -> int:
        return len(self.dataset)

    def groups(self, epoch_seed: int):
        return self.dataset.groups(epoch_seed)

    def __getitem__(self, key) -> dict:
        index, rng = sample_rng(key)
        pick = int(rng.integers(len(self.unlabeled))) if rng is not None else index % len(self.unlabeled)
        return {**self.dataset[key], "unlabeled": self.unlabeled.image(pick, rng)}


def whole_image_matrix(shape: tuple[int, int], size: tuple[int, int]) -> np.ndarray:
    """Pose: the whole image (H, W) ``shape`` as the person box, widened to the aspect of the crop ``size`` (H, W),
    as predict crops a box."""
    box = (0.0, 0.0, float(shape[1]), float(shape[0]))
    return affine.crop_matrix(*affine.box_to_center_scale(box, size[1] / size[0], 1.0), 0.0, size)


def fit_to(matrix: Callable[[tuple[int, int], tuple[int, int]], np.ndarray], size: tuple[int, int]) -> Fit:
    """``matrix(shape, size)`` as a ``Fit`` to ``size`` (picklable: loader workers may be spawned)."""
    return partial(_fit, matrix, tuple(size))


def _fit(matrix, size, shape):
    return matrix(shape, size)
