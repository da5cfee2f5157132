"""Alpha-matting metrics (SAD, MSE, gradient, connectivity), per image, reduced across processes by sums."""

from __future__ import annotations

from functools import lru_cache
from typing import Any

import numpy as np
import torch
from scipy import ndimage
from torch import Tensor
from torchmetrics import Metric

from sapiens2_ft.tasks.diagnostics import Bins, Diagnostics, error_histogram

GRADIENT_SIGMA = 1.4
CONNECTIVITY_STEP = 0.1
ERROR_BINS = Bins(1.0, 100)  # |alpha - alpha_gt| in bins of 0.01


@lru_cache(maxsize=4)
def gaussian_derivative_kernel(sigma: float = GRADIENT_SIGMA, epsilon: float = 1e-2) -> np.ndarray:
    """x-derivative-of-Gaussian kernel, unit L2 norm, half size where the Gaussian falls below ``epsilon``."""
    half = int(np.ceil(sigma * np.sqrt(-2.0 * np.log(np.sqrt(2.0 * np.pi) * sigma * epsilon))))
    u = np.arange(-half, half + 1, dtype=np.float64)
    gauss = np.exp(-(u**2) / (2.0 * sigma**2)) / (sigma * np.sqrt(2.0 * np.pi))
    kernel = np.outer(gauss, -u * gauss / sigma**2)  # rows: smoothing in y; columns: derivative in x
    return kernel / np.sqrt((kernel**2).sum())


def gradient_magnitude(alpha: np.ndarray, sigma: float = GRADIENT_SIGMA) -> np.ndarray:
    """|grad| of a 2-D map with Gaussian-derivative filters (replicate borders)."""
    kx = gaussian_derivative_kernel(sigma)
    gx = ndimage.convolve(alpha, kx, mode="nearest")
    gy = ndimage.convolve(alpha, kx.T, mode="nearest")
    return np.sqrt(gx**2 + gy**2)


def largest_component(region: np.ndarray) -> np.ndarray:
    """Largest 8-connected component of a bool map (all False when empty)."""
    labels, n = ndimage.label(region, structure=np.ones((3, 3), dtype=bool))
    if n == 0:
        return np.zeros_like(region)
    sizes = np.bincount(labels.ravel())[1:]
    return labels == (int(np.argmax(sizes)) + 1)


def connectivity_error(pred: np.ndarray, gt: np.ndarray, mask: np.ndarray, step: float = CONNECTIVITY_STEP) -> float:
    """Connectivity error (Rhemann et al.) over ``mask``, divided by 1000.

    For each threshold t = step, 2 step, ..., 1, a pixel leaves the largest connected component of
    {gt >= t and pred >= t} at level t; l is the previous threshold (1 if it never leaves).
    phi = 1 - d * [d >= 0.15] with d = alpha - l; the error is sum |phi_pred - phi_gt|.
    """
    thresholds = np.arange(0.0, 1.0 + step / 2, step)
    level = np.full(gt.shape, -1.0)
    for previous, t in zip(thresholds[:-1], thresholds[1:]):
        omega = largest_component((gt >= t) & (pred >= t))
        level[(level == -1) & ~omega] = previous
    level[level == -1] = 1.0
    d_pred, d_gt = pred - level, gt - level
    phi_pred = 1.0 - d_pred * (d_pred >= 0.15)
    phi_gt = 1.0 - d_gt * (d_gt >= 0.15)
    return float(np.abs(phi_pred - phi_gt)[mask].sum() / 1000.0)


class MattingMetrics(Metric):
    """Per-image SAD (sum |a - a_gt| / 1000), MSE (mean squared error), gradient error
    (sum of squared differences of Gaussian-derivative gradient magnitudes, sigma 1.4, / 1000) and
    connectivity error (/ 1000), each averaged over images. Alphas in [0, 1]. An optional mask
    (e.g. the trimap's unknown region) restricts where the errors are summed; gradients and
    connected components are still computed on the whole image. ``diagnostics()``: the ``alpha_error``
    histogram of |a - a_gt| over the same pixels (``ERROR_BINS``, a sum-reduced state; ``error_counts`` of the
    latest ``compute``).
    """

    is_differentiable = False
    higher_is_better = False
    full_state_update = False

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        for name in ("num_images", "sad", "mse", "grad", "conn"):
            self.add_state(name, default=torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("error_histogram", default=torch.zeros(ERROR_BINS.count, dtype=torch.int64),
                       dist_reduce_fx="sum")
        self.error_counts = torch.zeros(ERROR_BINS.count, dtype=torch.int64)
        self.error_summary = ""

    @staticmethod
    def _as_maps(x: Tensor, name: str) -> np.ndarray:
        """(B, 1, H, W) or (B, H, W) -> float64 numpy (B, H, W)."""
        if x.ndim == 4 and x.shape[1] == 1:
            x = x[:, 0]
        if x.ndim != 3:
            raise ValueError(f"MattingMetrics: {name} must be (B, 1, H, W) or (B, H, W), got {tuple(x.shape)}")
        return x.detach().double().cpu().numpy()

    def update(self, pred: Tensor, target: Tensor, mask: Tensor | None = None) -> None:
        """pred/target alphas in [0, 1], (B, [1,] H, W); mask (B, [1,] H, W) bool or None (all pixels)."""
        p, g = self._as_maps(pred, "pred"), self._as_maps(target, "target")
        m = np.ones(p.shape, dtype=bool) if mask is None else self._as_maps(mask, "mask") > 0
        if not (p.shape == g.shape == m.shape):
            raise ValueError(f"MattingMetrics: shapes differ: pred {p.shape}, target {g.shape}, mask {m.shape}")
        sums = np.zeros(4)
        for pi, gi, mi in zip(p, g, m):
            err = (pi - gi)[mi]
            grad = (gradient_magnitude(pi) - gradient_magnitude(gi))[mi]
            sums += (
                np.abs(err).sum() / 1000.0,
                (err**2).sum() / max(err.size, 1),
                (grad**2).sum() / 1000.0,
                connectivity_error(pi, gi, mi),
            )
        self.num_images += p.shape[0]
        self.error_histogram += ERROR_BINS.counts(torch.from_numpy(np.abs(p - g)[m])).to(self.device)
        for name, value in zip(("sad", "mse", "grad", "conn"), sums):
            setattr(self, name, getattr(self, name) + float(value))

    def compute(self) -> dict[str, Tensor]:
        """``sad``, ``mse``, ``grad``, ``conn`` averaged over images."""
        n = self.num_images.clamp_min(1.0)
        out = {name: getattr(self, name) / n for name in ("sad", "mse", "grad", "conn")}
        self.error_counts = self.error_histogram.detach().cpu().clone()
        pixels = int(self.error_counts.sum())
        self.error_summary = f"{pixels} pixels of {int(self.num_images)} images, MSE {float(out['mse']):.4f}"
        return out

    def diagnostics(self) -> Diagnostics:
        return error_histogram("alpha_error", ERROR_BINS, self.error_counts, "|alpha - alpha_gt|",
                               f"alpha error: {self.error_summary}", log_y=True)
