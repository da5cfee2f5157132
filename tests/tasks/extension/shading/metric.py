"""Shading errors: MAE, RMSE and the share of pixels within 0.05, reduced across processes by sums."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from sapiens2_ft.tasks.dense_maps import flatten_mask
from sapiens2_ft.tasks.diagnostics import Bins, Diagnostics, error_histogram

WITHIN = 0.05
ERROR_BINS = Bins(1.0, 100)  # |shading - shading_gt| in bins of 0.01


class ShadingMetrics(Metric):
    """Over the valid pixels of all images: ``mae``, ``rmse`` and ``within_0.05`` (% of pixels with an error
    below 0.05). ``diagnostics()``: the ``shading_error`` histogram (``error_counts`` of the latest ``compute``)."""

    is_differentiable = False
    higher_is_better = False
    full_state_update = False

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        for name in ("pixels", "abs_sum", "sq_sum", "within"):
            self.add_state(name, default=torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("histogram", default=torch.zeros(ERROR_BINS.count, dtype=torch.int64), dist_reduce_fx="sum")
        self.error_counts = torch.zeros(ERROR_BINS.count, dtype=torch.int64)

    def update(self, pred: Tensor, target: Tensor, mask: Tensor | None = None) -> None:
        """pred / target (B, 1, H, W) in [0, 1]; mask (B, [1,] H, W) of valid pixels (None: all)."""
        if pred.shape != target.shape or pred.ndim != 4 or pred.shape[1] != 1:
            raise ValueError(f"ShadingMetrics: expected pred and target (B, 1, H, W), got {tuple(pred.shape)} and "
                             f"{tuple(target.shape)}")
        error = (pred[:, 0] - target[:, 0]).abs().double()[flatten_mask(mask, pred)].to(self.device)
        self.pixels += error.numel()
        self.abs_sum += error.sum()
        self.sq_sum += error.square().sum()
        self.within += (error < WITHIN).sum()
        self.histogram += ERROR_BINS.counts(error).to(self.device)

    def compute(self) -> dict[str, Tensor]:
        n = self.pixels.clamp_min(1.0)
        self.error_counts = self.histogram.detach().cpu().clone()
        return {"mae": self.abs_sum / n, "rmse": (self.sq_sum / n).sqrt(), f"within_{WITHIN}": 100 * self.within / n}

    def diagnostics(self) -> Diagnostics:
        return error_histogram("shading_error", ERROR_BINS, self.error_counts, "|shading - shading_gt|",
                               f"shading error: {int(self.error_counts.sum())} pixels", log_y=True)
