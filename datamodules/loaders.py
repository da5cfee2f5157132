"""DataLoader construction shared by the DataModules, with a training order that can resume mid-epoch.

The training sampler draws epoch ``e``'s order from ``seed`` and ``e`` alone and hands each index out
with a per-sample seed, so a sample's augmentation depends on (seed, epoch, index) and not on which
worker or process draws it. A run resumed from a checkpoint in the middle of an epoch skips the
batches already trained (``skip``) and sees exactly the batches an uninterrupted run would.
"""

from __future__ import annotations

from typing import Callable, Iterator

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, Sampler


class EpochSeededSampler(Sampler):
    """Shuffled indices, the same for the same (seed, epoch); yields ``(index, sample_seed)`` pairs."""

    def __init__(self, num_samples: int, seed: int):
        self.num_samples = num_samples
        self.seed = int(seed) % 2**31  # torch.initial_seed() is 64-bit without seed_everything
        self.epoch = 0
        self._skip = 0

    def set_epoch(self, epoch: int) -> None:  # Lightning calls this at every epoch start
        self.epoch = int(epoch)

    def skip(self, count: int) -> None:
        """Leave out the first ``count`` samples of the next pass (already trained before a resume)."""
        self._skip = int(count)

    def __len__(self) -> int:
        return self.num_samples

    def __iter__(self) -> Iterator[tuple[int, int]]:
        generator = torch.Generator().manual_seed(self.seed * 100_003 + self.epoch)
        order = torch.randperm(self.num_samples, generator=generator).tolist()
        skip, self._skip = self._skip, 0
        epoch_seed = self.seed * 100_003 + self.epoch
        for index in order[skip:]:
            yield index, epoch_seed


def sample_rng(key) -> tuple[int, np.random.Generator | None]:
    """Dataset key -> (index, generator): ``(index, epoch_seed)`` from the training sampler gives a
    generator of its own; a plain index (validation) none."""
    if isinstance(key, (tuple, list)):
        index, epoch_seed = int(key[0]), int(key[1])
        return index, np.random.default_rng([epoch_seed, index])
    return int(key), None


def replace_bad_samples(load: Callable[[int], dict], index: int, length: int, on_bad_sample: str) -> dict:
    """``load(index)``; under ``on_bad_sample="skip"`` a sample raising DataError is replaced by the next
    readable one, and the item says how many were replaced (``bad_samples_replaced``, summed per run)."""
    from datamodules.coco_keypoints import DataError
    from lightning.pytorch.utilities import rank_zero_warn

    for attempt in range(length):
        try:
            item = load((index + attempt) % length)
        except DataError as err:
            if on_bad_sample != "skip":
                raise
            rank_zero_warn(f"skipping bad sample: {err}")
            continue
        item["bad_samples_replaced"] = attempt
        return item
    raise DataError(f"every one of the {length} samples is unusable")


def make_loader(dataset: Dataset, batch_size: int, shuffle: bool, num_workers: int, pin_memory: bool,
                persistent_workers: bool, seed: int | None = None) -> DataLoader:
    """Training loaders shuffle (``EpochSeededSampler``) and drop the last partial batch; pinning only where a
    GPU is present. ``seed`` defaults to torch's initial seed (set by ``seed_everything``)."""
    sampler = EpochSeededSampler(len(dataset), torch.initial_seed() if seed is None else seed) if shuffle else None
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=shuffle,
                      num_workers=num_workers, pin_memory=pin_memory and torch.cuda.is_available(),
                      persistent_workers=persistent_workers and num_workers > 0)
