"""One image + its dense targets -> one training or validation sample (see ``dense_files`` for the layout)."""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from torch.utils.data import Dataset

from datamodules import dense_files as files
from datamodules.dense_augment import DenseAugment, resolve_augment, validation_fit
from datamodules.dense_files import DenseSample
from datamodules.dense_filters import DenseFilter
from datamodules.dense_transforms import CANONICAL_FOCAL, DenseTransform, canonical_pointmap
from datamodules.loaders import FilteredSample, is_padding, replace_bad_samples, sample_rng
from datamodules.pose_dataset import read_image


def load_sample(sample: DenseSample, task: str, num_classes: int) -> dict:
    """Read and check the image and the ``task`` targets of one sample (numpy dict, see dense_transforms)."""
    image = read_image(str(sample.image))
    shape = image.shape[:2]
    f = sample.files
    out = {"image": image}
    if task == "seg":
        out["labels"] = files.load_labels(f["labels"], shape, num_classes)
    elif task == "normal":
        out["mask"] = files.load_mask(f.get("mask"), shape)
        out["normals"] = files.load_normals(f["normals"], shape, out["mask"])
    elif task == "pointmap":
        out["mask"] = files.load_mask(f.get("mask"), shape)
        if "depth" in f:
            out["depth"] = files.load_depth(f["depth"], shape, out["mask"])
            out["K"] = files.load_intrinsics(f["intrinsics"])
        else:
            out["pointmap"] = files.load_pointmap(f["pointmap"], shape, out["mask"])
            out["K"] = (files.load_intrinsics(f["intrinsics"]) if "intrinsics" in f
                        else files.fit_intrinsics(out["pointmap"], out["mask"], f["pointmap"]))
    elif task == "matting":
        out["alpha"] = files.load_alpha(f["alpha"], shape)
        if "foreground" in f:
            out["foreground"] = files.load_foreground(f["foreground"], shape)
    return out


def _chw(array: np.ndarray) -> torch.Tensor:
    return torch.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)))


def to_item(sample: dict, task: str, canonical_focal: float = CANONICAL_FOCAL) -> dict:
    """Transformed numpy sample -> tensors of the dataset item."""
    item = {"image": _chw(sample["image"])}
    if task == "seg":
        item["labels"] = torch.from_numpy(sample["labels"].astype(np.int64))
    elif task == "normal":
        item["normals"] = _chw(sample["normals"].astype(np.float32))
        item["mask"] = torch.from_numpy(sample["mask"])
    elif task == "pointmap":
        xyz, scale = canonical_pointmap(sample.get("depth", sample.get("pointmap")), sample["K"], canonical_focal)
        mask = sample["mask"]
        item["pointmap"] = _chw(np.where(mask[..., None], xyz, 0).astype(np.float32))
        item["mask"] = torch.from_numpy(mask)
        item["scale"] = torch.tensor(scale, dtype=torch.float32)
        item["intrinsics"] = torch.from_numpy(sample["K"].astype(np.float32))
    elif task == "matting":
        alpha = np.clip(sample["alpha"], 0, 1).astype(np.float32)
        h, w = alpha.shape
        fg = sample.get("foreground")
        item["alpha"] = torch.from_numpy(alpha[None])
        item["foreground"] = _chw(np.clip(fg, 0, 1) if fg is not None else np.zeros((h, w, 3), np.float32))
        item["has_foreground"] = torch.tensor(fg is not None)
    return item


class DenseDataset(Dataset):
    """Dense samples of one task resized / augmented to ``input_size`` (H, W).

    Items: ``image`` uint8 (3, H, W), ``name`` and per task: seg ``labels`` int64 (H, W) (255 = ignore);
    normal ``normals`` float32 (3, H, W) + ``mask`` bool (H, W); pointmap ``pointmap`` float32 (3, H, W)
    canonical XYZ (``canonical_pointmap``) + ``mask`` + ``scale`` + ``intrinsics`` (3, 3) of the output
    image (depth files are back-projected at the output pixel centres with that K; a pointmap file keeps
    the XYZ of its nearest source pixel); matting ``alpha`` (1, H, W) + ``foreground`` (3, H, W) in
    [0, 1] (zeros without a foreground file) + ``has_foreground`` bool.

    ``augment`` (unset fields: the task's defaults, see ``dense_augment``) makes it a training set; without it
    images are resized by ``fit`` (default: the one matching the task's training pipeline). ``filter``: samples
    it leaves out are replaced by the next one and counted (``filtered_samples``); by default training sets
    are filtered with the upstream checks, validation sets are not.
    ``on_bad_sample="skip"``: a sample raising DataError is warned about and replaced by the next one;
    the item counts the replaced ones (``bad_samples_replaced``).
    """

    def __init__(self, samples: list[DenseSample], task: str, input_size: tuple[int, int], num_classes: int = 29,
                 flip_classes=None, augment: DenseAugment | dict | None = None,
                 on_bad_sample: Literal["error", "skip"] = "error", canonical_focal: float = CANONICAL_FOCAL,
                 filter: DenseFilter | None = None, fit: str | None = None):
        if task not in files.TASKS:
            raise ValueError(f"dense_dataset.py: unknown task {task!r}; expected one of {files.TASKS}")
        self.samples = samples
        self.task = task
        self.num_classes = num_classes
        self.augment = resolve_augment(augment, task) if augment is not None else None
        fit = fit or validation_fit(self.augment, task)
        self.transform = DenseTransform(input_size, self.augment, flip_classes, num_classes, fit)
        self.filter = filter if filter is not None else (DenseFilter() if self.augment is not None else None)
        self.on_bad_sample = on_bad_sample
        self.canonical_focal = canonical_focal
        self._rng: np.random.Generator | None = None

    def __len__(self) -> int:
        return len(self.samples)

    def rng(self) -> np.random.Generator:
        """Fallback for plain integer keys: one generator per worker, seeded from torch. The training
        sampler gives each sample its own (``loaders.sample_rng``)."""
        if self._rng is None:
            self._rng = np.random.default_rng(torch.initial_seed())
        return self._rng

    def item(self, index: int, rng: np.random.Generator | None = None) -> dict:
        sample = self.samples[index]
        data = load_sample(sample, self.task, self.num_classes)
        data = self.transform(data, rng)
        item = to_item(data, self.task, self.canonical_focal)
        left_out = self.filter.reason(item, "mask" in sample.files) if self.filter is not None else None
        if left_out is not None:
            raise FilteredSample(sample.name, *left_out)
        return {**item, "name": sample.name}

    def __getitem__(self, key) -> dict:
        """``key``: an index, ``(index, epoch_seed)`` from the training sampler, or a validation
        :class:`~datamodules.loaders.PaddingKey` (the item says ``padding: True``; metrics skip it)."""
        index, rng = sample_rng(key)
        if rng is None and self.augment is not None:
            rng = self.rng()
        item = replace_bad_samples(lambda i: self.item(i, rng if self.augment is not None else None), index,
                                   len(self), self.on_bad_sample)
        return {**item, "padding": is_padding(key)}
