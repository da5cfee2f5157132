"""DataLoader construction shared by the DataModules."""

from __future__ import annotations

import torch
from torch.utils.data import DataLoader, Dataset


def make_loader(dataset: Dataset, batch_size: int, shuffle: bool, num_workers: int, pin_memory: bool,
                persistent_workers: bool) -> DataLoader:
    """Training loaders shuffle and drop the last partial batch; pinning only where a GPU is present."""
    return DataLoader(dataset, batch_size=batch_size, shuffle=shuffle, drop_last=shuffle,
                      num_workers=num_workers, pin_memory=pin_memory and torch.cuda.is_available(),
                      persistent_workers=persistent_workers and num_workers > 0)
