"""Surface-normal angular error metrics, reduced across processes by sums and a histogram."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from sapiens2_ft.tasks.dense_maps import angular_error_deg, flatten_mask
from sapiens2_ft.tasks.diagnostics import Bins, Diagnostics, error_histogram

THRESHOLDS_DEG = (5.0, 11.25, 22.5, 30.0)
BIN_DEG = 0.01
NUM_BINS = int(round(180.0 / BIN_DEG))
DIAGNOSTIC_BINS = Bins(180.0, 180)  # 1-degree bins of the diagnostics' histogram (sums of the fine bins)


class NormalMetrics(Metric):
    """Mean / median / RMSE angular error (degrees) and % of pixels within 5, 11.25, 22.5, 30 degrees.

    Mean and RMSE come from sums; the median from a histogram of 0.01-degree bins over [0, 180]
    (the centre of the median bin, so exact to +-0.005 degrees). Within-thresholds are strict (<).
    ``diagnostics()``: the ``angle_error`` histogram in 1-degree bins (``angle_counts``, of the latest ``compute``).
    """

    is_differentiable = False
    higher_is_better = False
    full_state_update = False

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_state("count", default=torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("sum_angle", default=torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("sum_sq_angle", default=torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("within", default=torch.zeros(len(THRESHOLDS_DEG), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("histogram", default=torch.zeros(NUM_BINS, dtype=torch.int64), dist_reduce_fx="sum")
        self.angle_counts = torch.zeros(DIAGNOSTIC_BINS.count, dtype=torch.int64)
        self.angle_summary = ""

    def update(self, pred: Tensor, target: Tensor, mask: Tensor | None = None) -> None:
        """pred/target (B, 3, H, W) normals (need not be unit), mask (B, [1,] H, W) of valid pixels."""
        if pred.shape != target.shape or pred.ndim != 4 or pred.shape[1] != 3:
            raise ValueError(
                f"NormalMetrics: expected pred and target (B, 3, H, W), "
                f"got {tuple(pred.shape)} and {tuple(target.shape)}"
            )
        angle = angular_error_deg(pred, target)[flatten_mask(mask, pred)].to(self.device)
        self.count += angle.numel()
        self.sum_angle += angle.sum()
        self.sum_sq_angle += angle.pow(2).sum()
        self.within += torch.stack([(angle < t).sum() for t in THRESHOLDS_DEG]).double() if angle.numel() else 0.0
        bins = (angle / BIN_DEG).long().clamp(0, NUM_BINS - 1)
        self.histogram += torch.bincount(bins, minlength=NUM_BINS)

    def compute(self) -> dict[str, Tensor]:
        """``angle_mean``, ``angle_median``, ``angle_rmse`` (degrees); ``within_{5,11.25,22.5,30}`` (% of pixels)."""
        n = self.count.clamp_min(1.0)
        cumulative = self.histogram.cumsum(0)
        if self.count > 0:
            median_bin = torch.searchsorted(cumulative, (self.count / 2).ceil().long().reshape(1)).squeeze()
            median = (median_bin.double() + 0.5) * BIN_DEG
        else:
            median = self.count.new_zeros(())
        out = {"angle_mean": self.sum_angle / n, "angle_median": median, "angle_rmse": (self.sum_sq_angle / n).sqrt()}
        for t, k in zip(THRESHOLDS_DEG, self.within):
            out[f"within_{t:g}"] = 100.0 * k / n
        self.angle_counts = self.histogram.detach().cpu().reshape(DIAGNOSTIC_BINS.count, -1).sum(1)
        self.angle_summary = (f"{int(self.count)} pixels, mean {float(out['angle_mean']):.2f}, "
                              f"median {float(median):.2f} deg")
        return out

    def diagnostics(self) -> Diagnostics:
        return error_histogram("angle_error", DIAGNOSTIC_BINS, self.angle_counts, "angle error (degrees)",
                               f"normal angle error: {self.angle_summary}")
