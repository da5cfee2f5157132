"""Albedo errors as upstream's ``AlbedoEvaluator`` computes them (MAE, RMSE, PSNR, masked SSIM, gradient L1),
reduced across processes by sums."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor
from torchmetrics import Metric

from sapiens2_ft.tasks.dense_maps import as_mask, finite_differences
from sapiens2_ft.tasks.diagnostics import Bins, Diagnostics, error_histogram

DATA_RANGE = 1.0  # albedo in [0, 1] (upstream switches to 255 for 8-bit targets)
SSIM_WINDOW, SSIM_SIGMA = 11, 1.5
SSIM_MIN_SUPPORT = 0.5  # a window counts when its Gaussian weight over valid pixels exceeds this
ERROR_BINS = Bins(1.0, 100)  # |albedo - albedo_gt| (mean over RGB) in bins of 0.01
SUMS = ("abs_sum", "sq_sum", "pixels", "grad_sum", "grad_pairs", "ssim_sum", "ssim_windows")


@lru_cache(maxsize=4)
def gaussian_window(size: int = SSIM_WINDOW, sigma: float = SSIM_SIGMA) -> Tensor:
    """(1, 1, size, size) float32 Gaussian that sums to 1."""
    axis = torch.arange(size, dtype=torch.float64) - (size - 1) / 2
    g = torch.exp(-(axis[:, None] ** 2 + axis[None, :] ** 2) / (2 * sigma * sigma))
    return (g / g.sum()).float().view(1, 1, size, size)


def masked_ssim(pred: Tensor, target: Tensor, mask: Tensor, data_range: float = DATA_RANGE) -> tuple[Tensor, Tensor]:
    """(sum of SSIM over the counted windows, their number) of pred / target (B, C, H, W) and mask (B, 1, H, W).

    Local statistics are Gaussian-weighted means over the valid pixels of each window (zero padding outside the
    image); a pixel's SSIM is the channel mean of (2 mu_x mu_y + C1)(2 s_xy + C2) / ((mu_x^2 + mu_y^2 + C1)
    (s_x^2 + s_y^2 + C2)), C1 = (0.01 L)^2, C2 = (0.03 L)^2; windows count where the valid pixels weigh more than
    ``SSIM_MIN_SUPPORT``.
    """
    c1, c2 = (0.01 * data_range) ** 2, (0.03 * data_range) ** 2
    x, y, m = pred.float(), target.float(), mask.float()
    window = gaussian_window().to(x.device)
    channels, pad = x.shape[1], SSIM_WINDOW // 2
    support = F.conv2d(m, window, padding=pad)
    weight = support.clamp_min(1e-8)

    def local_mean(z: Tensor) -> Tensor:
        return F.conv2d(z * m, window.expand(channels, 1, -1, -1), padding=pad, groups=channels) / weight

    mu_x, mu_y = local_mean(x), local_mean(y)
    var_x, var_y = local_mean(x * x) - mu_x * mu_x, local_mean(y * y) - mu_y * mu_y
    cov = local_mean(x * y) - mu_x * mu_y
    ssim = ((2 * mu_x * mu_y + c1) * (2 * cov + c2)) / ((mu_x * mu_x + mu_y * mu_y + c1) * (var_x + var_y + c2) + 1e-8)
    counted = support > SSIM_MIN_SUPPORT
    return ssim.mean(1, keepdim=True)[counted].double().sum(), counted.sum().double()


class AlbedoMetrics(Metric):
    """Over the valid pixels of all images, each pixel's error the mean over R, G, B: ``mae``, ``rmse``, ``psnr``
    (10 log10(1 / MSE) of the pooled MSE), ``ssim`` (the mean over all counted windows, ``masked_ssim``) and
    ``grad_l1`` (mean |d pred - d target| of x and y differences over pairs of valid pixels). ``diagnostics()``:
    the ``albedo_error`` histogram (``error_counts`` of the latest ``compute``)."""

    is_differentiable = False
    higher_is_better = None  # mae, rmse, grad_l1: lower; psnr, ssim: higher
    full_state_update = False

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        for name in SUMS:
            self.add_state(name, default=torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("histogram", default=torch.zeros(ERROR_BINS.count, dtype=torch.int64), dist_reduce_fx="sum")
        self.error_counts = torch.zeros(ERROR_BINS.count, dtype=torch.int64)

    def update(self, pred: Tensor, target: Tensor, mask: Tensor | None = None) -> None:
        """pred / target (B, 3, H, W) RGB albedo; mask (B, [1,] H, W) of valid pixels (None: all)."""
        if pred.shape != target.shape or pred.ndim != 4 or pred.shape[1] != 3:
            raise ValueError(f"AlbedoMetrics: expected pred and target (B, 3, H, W), got {tuple(pred.shape)} and "
                             f"{tuple(target.shape)}")
        pred, target = pred.float(), target.float()
        m = as_mask(mask, pred)
        valid = m[:, 0] > 0
        target = torch.where(m > 0, target, 0.0)  # invalid pixels may hold anything; SSIM's windows read them
        diff = pred - target
        error = diff.abs().mean(1)[valid].double()
        self.abs_sum += error.sum().to(self.device)
        self.sq_sum += diff.square().mean(1)[valid].double().sum().to(self.device)
        self.pixels += valid.sum().double().to(self.device)
        for (d_pred, pair), (d_target, _) in zip(finite_differences(pred, m), finite_differences(target, m)):
            counted = pair[:, 0] > 0
            self.grad_sum += (d_pred - d_target).abs().mean(1)[counted].double().sum().to(self.device)
            self.grad_pairs += counted.sum().double().to(self.device)
        ssim_sum, windows = masked_ssim(pred, target, m)
        self.ssim_sum += ssim_sum.to(self.device)
        self.ssim_windows += windows.to(self.device)
        self.histogram += ERROR_BINS.counts(error).to(self.device)

    def compute(self) -> dict[str, Tensor]:
        mse = (self.sq_sum / self.pixels.clamp_min(1.0)).clamp_min(1e-12)
        self.error_counts = self.histogram.detach().cpu().clone()
        return {"mae": self.abs_sum / self.pixels.clamp_min(1.0), "rmse": mse.sqrt(),
                "psnr": 10.0 * torch.log10(DATA_RANGE**2 / mse),
                "ssim": self.ssim_sum / self.ssim_windows.clamp_min(1.0),
                "grad_l1": self.grad_sum / self.grad_pairs.clamp_min(1.0)}

    def diagnostics(self) -> Diagnostics:
        return error_histogram("albedo_error", ERROR_BINS, self.error_counts, "|albedo - albedo_gt| (mean of R, G, B)",
                               f"albedo error: {int(self.error_counts.sum())} pixels", log_y=True)
