"""Several training datasets in one run, each drawn ``repeat`` times per epoch (upstream's per-dataset repeats).

``MixedDataset`` lays its parts end to end: part ``p`` of ``n`` samples takes ``round(repeat * n)`` positions
(at least one). Whole repeats take every sample once each; the fractional rest is a different subset every
epoch, drawn from the epoch's seed. The mixed dataset is a plain map-style dataset of fixed length, so the
seeded epoch order and the mid-epoch resume of ``loaders`` apply to it unchanged, and every position gets its
own augmentation (a sample repeated twice in an epoch is augmented twice, differently).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

import numpy as np
import torch
from torch.utils.data import Dataset

from datamodules.errors import DataError
from datamodules.loaders import PaddingKey


@dataclass(frozen=True)
class SourceCount:
    """One part of a mix, for logs and the run summary."""

    name: str
    samples: int  # usable samples listed
    repeat: float
    per_epoch: int  # positions in one epoch

    def describe(self) -> str:
        return f"{self.name}: {self.samples} samples x {self.repeat:g} = {self.per_epoch} per epoch"


def source_names(names: list[str | None], roots: list[str]) -> list[str]:
    """Each source's name: its own, else its root folder's name; repeats get ``-2``, ``-3``... appended."""
    out: list[str] = []
    for name, root in zip(names, roots):
        base = name or str(root).rstrip("/").rsplit("/", 1)[-1] or "dataset"
        candidate, k = base, 2
        while candidate in out:
            candidate, k = f"{base}-{k}", k + 1
        out.append(candidate)
    return out


class MixedDataset(Dataset):
    """``parts`` end to end, part ``p`` drawn ``repeats[p]`` times per epoch; items say ``source`` (part index).

    Keys are those of the training sampler (``(index, epoch_seed)``), a plain index or a ``PaddingKey``; a part
    receives ``(sample, epoch_seed, index)`` for the first, so its per-sample generator follows the mixed
    position, and the plain index or ``PaddingKey`` of its sample otherwise."""

    def __init__(self, parts: list[Dataset], repeats: list[float], names: list[str]):
        if not parts or len(parts) != len(repeats) or len(parts) != len(names):
            raise ValueError("MixedDataset needs one repeat and one name per part")
        self.parts = parts
        self.counts: list[SourceCount] = []
        for part, repeat, name in zip(parts, repeats, names):
            if not (isinstance(repeat, (int, float)) and math.isfinite(repeat) and repeat > 0):
                raise DataError(f"data.train: dataset {name!r}: repeat must be a number > 0, got {repeat!r}")
            size = len(part)
            self.counts.append(SourceCount(name, size, float(repeat), max(1, round(repeat * size))))
        self.starts = [0]
        for count in self.counts:
            self.starts.append(self.starts[-1] + count.per_epoch)

    def __len__(self) -> int:
        return self.starts[-1]

    def locate(self, index: int, epoch_seed: int) -> tuple[int, int]:
        """Mixed position -> (part, sample of that part) in the epoch of ``epoch_seed``."""
        if not 0 <= index < len(self):
            raise IndexError(f"index {index} out of range for {len(self)} mixed samples")
        part = bisect.bisect_right(self.starts, index) - 1
        offset, size = index - self.starts[part], self.counts[part].samples
        whole = (self.counts[part].per_epoch // size) * size
        if offset < whole:
            return part, offset % size
        order = torch.randperm(size, generator=torch.Generator().manual_seed(epoch_seed * 1_009 + part))
        return part, int(order[offset - whole])

    def groups(self, epoch_seed: int) -> np.ndarray | None:
        """The shard of each mixed position in the epoch of ``epoch_seed`` (None when a part is read from files)."""
        shards = []
        for part, (dataset, count) in enumerate(zip(self.parts, self.counts)):
            of_part = dataset.groups(epoch_seed)
            if of_part is None:
                return None
            whole = (count.per_epoch // count.samples) * count.samples
            rest = torch.randperm(count.samples, generator=torch.Generator().manual_seed(epoch_seed * 1_009 + part))
            samples = np.concatenate([np.arange(whole) % count.samples, rest[:count.per_epoch - whole].numpy()])
            shards.append(of_part[samples])
        return np.concatenate(shards)

    def __getitem__(self, key) -> dict:
        if isinstance(key, (tuple, list)):
            index, epoch_seed = int(key[0]), int(key[1])
            part, sample = self.locate(index, epoch_seed)
            inner = (sample, epoch_seed, index)
        else:
            index = key.index if isinstance(key, PaddingKey) else int(key)
            part, sample = self.locate(index, 0)
            inner = PaddingKey(sample) if isinstance(key, PaddingKey) else sample
        return {**self.parts[part][inner], "source": part}
