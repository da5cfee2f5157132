"""DataLoader construction shared by the DataModules, with a training order that can resume mid-epoch.

The training sampler draws epoch ``e``'s order from ``seed`` and ``e`` alone and hands each index out
with a per-sample seed, so a sample's augmentation depends on (seed, epoch, index) and not on which
worker or process draws it. With several processes each takes every ``world_size``-th index of that
order (the trainer runs with ``use_distributed_sampler=False``). Validation is split the same way without
shuffling (``ValShardSampler``); the repeats that even out the processes' batch counts are marked so
metrics leave them out. A run resumed from a checkpoint builds its training loader at the saved
:class:`TrainPosition` (its epoch, after the batches already trained in it) and sees exactly the batches
an uninterrupted run would, with or without loader workers.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info, rank_zero_warn
from torch.utils.data import DataLoader, Dataset, Sampler

from datamodules.errors import DataError


class EpochSeededSampler(Sampler):
    """Shuffled indices, the same for the same (seed, epoch); yields ``(index, epoch_seed)`` pairs.

    Process ``rank`` of ``world_size`` takes positions ``rank, rank + world_size, ...`` of the epoch's
    order, the same number on every process (the remainder is left out that epoch).

    ``groups(epoch_seed)``, when given and not None, is the shard of each sample: the epoch's order is then
    shard by shard (the shards in a random order, the samples of each in a random order) and each process
    takes a contiguous run of it, so that a shard is read by one process, a few at a time (``block_order``).
    """

    def __init__(self, num_samples: int, seed: int, rank: int = 0, world_size: int = 1,
                 groups: Callable[[int], np.ndarray | None] | None = None):
        self.num_samples = num_samples
        self.seed = int(seed) % 2**31  # torch.initial_seed() is 64-bit without seed_everything
        self.rank, self.world_size = rank, world_size
        self.groups = groups
        self.epoch = 0
        self._skip = 0

    def set_epoch(self, epoch: int) -> None:  # Lightning calls this at every epoch start
        self.epoch = int(epoch)

    def skip(self, count: int) -> None:
        """Leave out the first ``count`` samples of the next pass (already trained before a resume)."""
        self._skip = int(count)

    def __len__(self) -> int:
        return self.num_samples // self.world_size

    def __iter__(self) -> Iterator[tuple[int, int]]:
        epoch_seed = self.seed * 100_003 + self.epoch
        generator = torch.Generator().manual_seed(epoch_seed)
        groups = self.groups(epoch_seed) if self.groups is not None else None
        if groups is None:
            order = torch.randperm(self.num_samples, generator=generator).tolist()
            mine = order[self.rank::self.world_size][:len(self)]
        else:
            share = len(self)
            mine = block_order(groups, generator)[self.rank * share:(self.rank + 1) * share].tolist()
        skip, self._skip = self._skip, 0
        for index in mine[skip:]:
            yield index, epoch_seed


def block_order(groups: np.ndarray, generator: torch.Generator) -> np.ndarray:
    """Indices ordered group by group: the groups in a random order, each group's indices in a random order."""
    names, group = np.unique(groups, return_inverse=True)
    rank = torch.randperm(len(names), generator=generator).numpy()[group]
    within = torch.randperm(len(groups), generator=generator).numpy()
    return np.lexsort((within, rank))


@dataclass(frozen=True)
class TrainPosition:
    """Where training stands in its data: ``batches`` batches of epoch ``epoch`` are trained (an epoch's
    end is the next epoch at 0). The same on every process, whose loader skips its own share of them."""

    epoch: int = 0
    batches: int = 0

    def __post_init__(self):
        if self.epoch < 0 or self.batches < 0:
            raise ValueError(f"TrainPosition: epoch and batches must be >= 0, got {self.epoch}, {self.batches}")


@dataclass(frozen=True)
class PaddingKey:
    """A validation sample repeated so that every process runs the same number of batches (a sharded
    model needs all of them in every forward); items loaded with it say ``padding: True``."""

    index: int


class ValShardSampler(Sampler):
    """Validation order split over processes: process ``rank`` takes positions ``rank, rank + world_size,
    ...``; the last round is filled up with :class:`PaddingKey` repeats of the first samples."""

    def __init__(self, num_samples: int, rank: int, world_size: int):
        self.num_samples, self.rank, self.world_size = num_samples, rank, world_size

    def __len__(self) -> int:
        return math.ceil(self.num_samples / self.world_size)

    def __iter__(self) -> Iterator:
        for position in range(self.rank, len(self) * self.world_size, self.world_size):
            yield position if position < self.num_samples else PaddingKey(position - self.num_samples)


def is_padding(key) -> bool:
    return isinstance(key, PaddingKey)


def sample_rng(key) -> tuple[int, np.random.Generator | None]:
    """Dataset key -> (index, generator): ``(index, epoch_seed)`` from the training sampler gives a
    generator of its own; a plain index or a :class:`PaddingKey` (validation) none. A mixed dataset passes
    ``(index, epoch_seed, position)``: the generator follows its mixed position, so repeats differ."""
    if isinstance(key, PaddingKey):
        return key.index, None
    if isinstance(key, (tuple, list)):
        index, epoch_seed = int(key[0]), int(key[1])
        draw = int(key[2]) if len(key) > 2 else index
        return index, np.random.default_rng([epoch_seed, draw])
    return int(key), None


MAX_REPLACEMENTS = 16  # unreadable samples in a row replaced before loading gives up
MAX_FILTERED = 64  # samples in a row left out by a data filter before loading gives up
FILTER_LOG_LIMIT = 5  # filtered samples named in the log per process; the rest are only counted
_filter_logged = 0


class FilteredSample(Exception):
    """Raised by a dataset for a readable sample that a data filter leaves out (``data.filter.<check>``): it
    is replaced like an unreadable one but counted apart (``filtered_samples``), and never an error."""

    def __init__(self, name: str, check: str, reason: str):
        super().__init__(f"{name}: {reason}")
        self.check = check


def replace_bad_samples(load: Callable[[int], dict], index: int, length: int, on_bad_sample: str) -> dict:
    """``load(index)``; a sample raising :class:`FilteredSample`, or DataError under ``on_bad_sample="skip"``,
    is replaced by the next usable one, and the item says how many were replaced (``bad_samples_replaced``,
    ``filtered_samples``; summed per run). After ``MAX_REPLACEMENTS`` unreadable samples the data is taken to
    be gone (an unmounted volume, say), after ``MAX_FILTERED`` filtered ones the filters to be wrong for the
    data: the error is raised instead of trying every file."""
    global _filter_logged
    bad, filtered, last_error, last_filtered, checks = 0, 0, None, None, Counter()
    for attempt in range(length):
        try:
            item = load((index + attempt) % length)
        except FilteredSample as err:
            filtered, last_filtered = filtered + 1, err
            checks[err.check] += 1
            if _filter_logged < FILTER_LOG_LIMIT:
                _filter_logged += 1
                more = "; further ones are only counted (summary.json: filtered_samples)" if (
                    _filter_logged == FILTER_LOG_LIMIT) else ""
                rank_zero_info(f"data.filter left out {err}{more}")
            if filtered >= MAX_FILTERED:
                break
            continue
        except DataError as err:
            if on_bad_sample != "skip":
                raise
            rank_zero_warn(f"skipping bad sample: {err}")
            bad, last_error = bad + 1, err
            if bad > MAX_REPLACEMENTS:
                break
            continue
        item["bad_samples_replaced"] = bad
        item["filtered_samples"] = filtered
        return item
    if filtered >= MAX_FILTERED or last_error is None:
        raise DataError(f"{filtered} samples in a row were left out by data.filter.* (from index {index}; "
                        f"{dict(checks)}), last: {last_filtered}. Do these checks suit the data?")
    raise DataError(f"{bad + filtered} samples in a row are unusable (from index {index}); is the data still "
                    f"there? last: {last_error}")


def _process() -> tuple[int, int]:
    """(rank, world size) of the initialised process group, (0, 1) without one."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        return torch.distributed.get_rank(), torch.distributed.get_world_size()
    return 0, 1


def make_loader(dataset: Dataset, batch_size: int, shuffle: bool, num_workers: int, pin_memory: bool,
                persistent_workers: bool, seed: int | None = None, start: TrainPosition | None = None,
                groups: Callable[[int], np.ndarray | None] | None = None) -> DataLoader:
    """Training loaders shuffle (``EpochSeededSampler``, shard by shard with ``groups``) and drop the last
    partial batch; validation loaders are split over processes (``ValShardSampler``, no shuffle); pinning only
    where a GPU is present. ``seed`` defaults to torch's initial seed (set by ``seed_everything``). A training
    loader's first pass begins at ``start`` (a resumed run), set here because a loader with workers draws its
    first indices as soon as it is iterated."""
    rank, world = _process()
    if shuffle:
        sampler = EpochSeededSampler(len(dataset), torch.initial_seed() if seed is None else seed, rank, world,
                                     groups)
        if len(sampler) < batch_size:  # every batch partial, hence dropped: the fit would end at step 0
            raise DataError(f"the training set has {len(dataset)} samples ({len(sampler)} per process), fewer than "
                            f"data.batch_size {batch_size}: a training batch is never full and none would be "
                            f"trained; lower data.batch_size to {max(1, len(sampler))} or less, or add data")
        if start is not None:
            sampler.set_epoch(start.epoch)
            sampler.skip(start.batches * batch_size)
    else:
        sampler = ValShardSampler(len(dataset), rank, world) if world > 1 else None
    return DataLoader(dataset, batch_size=batch_size, sampler=sampler, drop_last=shuffle,
                      num_workers=num_workers, pin_memory=pin_memory and torch.cuda.is_available(),
                      persistent_workers=persistent_workers and num_workers > 0)
