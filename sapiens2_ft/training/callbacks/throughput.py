"""Training speed and memory, logged every step: samples/s over all processes and peak device memory."""

from __future__ import annotations

import resource
import sys
import time

import lightning as L
import torch


def peak_memory_gib(device: torch.device) -> float:
    """Peak allocated accelerator memory of this process (CUDA), else its peak resident CPU memory."""
    if device.type == "cuda":
        return torch.cuda.max_memory_allocated(device) / 2**30
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux, bytes on macOS
    return peak / (2**30 if sys.platform == "darwin" else 2**20)


class Throughput(L.Callback):
    """Logs ``train/samples_per_s`` (all processes, smoothed; shown in the progress bar) and
    ``system/peak_memory_gib`` (this process: CUDA allocated, or CPU resident on CPU runs)."""

    def __init__(self, smoothing: float = 0.9):
        self.smoothing = smoothing
        self._start: float | None = None
        self._rate: float | None = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._start = time.perf_counter()

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._start is None:
            return
        elapsed = time.perf_counter() - self._start
        size = len(batch["image"]) * trainer.world_size
        rate = size / max(elapsed, 1e-9)
        self._rate = rate if self._rate is None else self.smoothing * self._rate + (1 - self.smoothing) * rate
        pl_module.log("train/samples_per_s", self._rate, prog_bar=True, batch_size=1)
        pl_module.log("system/peak_memory_gib", peak_memory_gib(pl_module.device), batch_size=1)
