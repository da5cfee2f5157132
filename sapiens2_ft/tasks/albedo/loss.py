"""Albedo loss of the upstream Sapiens2 recipe: L1 + finite-difference gradient + chromaticity L1."""

from __future__ import annotations

import torch

from sapiens2_ft.tasks.dense_maps import as_mask, finite_differences, masked_mean

CHROMA_EPS = 1e-6


def chromaticity(rgb: torch.Tensor) -> torch.Tensor:
    """Each pixel's colour divided by the sum of its three channels (B, 3, H, W): the colour without its brightness."""
    return rgb / (rgb.sum(1, keepdim=True) + CHROMA_EPS)


def albedo_loss(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor | None, l1_weight: float = 2.0,
                grad_weight: float = 2.0, chroma_weight: float = 1.0) -> dict[str, torch.Tensor]:
    """pred raw (B, 3, H, W), target RGB albedo (B, 3, H, W) in [0, 1], mask (B, [1,] H, W) of valid pixels.

    Returns ``{"l1", "grad", "chroma", "loss"}`` as upstream (``dense/src/models/losses/{l1_loss,albedo_loss}.py``,
    the weights of ``dense/configs/albedo/**``), each a mean over valid pixels of a sum over the 3 channels:
    ``l1`` = |pred - target| (raw pred); ``grad`` = half the sum of the squared error of the x-differences of the raw
    pred vs the target's (pairs of valid pixels) and that of the y-differences; ``chroma`` = |c(pred clamped to
    [0, 1]) - c(target)| with c the ``chromaticity``. Invalid target pixels may hold anything (NaN included).
    """
    if pred.shape != target.shape or pred.ndim != 4 or pred.shape[1] != 3:
        raise ValueError(
            f"albedo_loss: expected pred and target (B, 3, H, W), got {tuple(pred.shape)} and {tuple(target.shape)}"
        )
    pred, target = pred.float(), target.float()
    m = as_mask(mask, pred)
    target = torch.where(m > 0, target, 0.0)
    l1 = masked_mean((pred - target).abs().sum(1, keepdim=True), m)
    grad = pred.new_zeros(())
    for (d_pred, pair), (d_target, _) in zip(finite_differences(pred, m), finite_differences(target, m)):
        grad = grad + 0.5 * masked_mean((d_pred - d_target).square().sum(1, keepdim=True), pair)
    chroma = masked_mean((chromaticity(pred.clamp(0.0, 1.0)) - chromaticity(target)).abs().sum(1, keepdim=True), m)
    return {"l1": l1, "grad": grad, "chroma": chroma,
            "loss": l1_weight * l1 + grad_weight * grad + chroma_weight * chroma}
