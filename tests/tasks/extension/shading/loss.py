"""Shading loss: L1 of the grey shading over the valid pixels, plus L1 of its finite differences."""

from __future__ import annotations

import torch

from sapiens2_ft.tasks.dense_maps import as_mask, finite_differences, masked_mean


def shading_loss(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor | None,
                gradient_weight: float = 0.5) -> dict[str, torch.Tensor]:
    """pred / target (B, 1, H, W) in [0, 1], mask (B, [1,] H, W) of valid pixels.

    Returns ``{"l1", "gradient", "loss"}``: mean |pred - target|, the mean L1 of the x and y differences of pred
    against the target's (pairs of valid pixels), and ``l1 + gradient_weight * gradient``.
    """
    if pred.shape != target.shape or pred.ndim != 4 or pred.shape[1] != 1:
        raise ValueError(f"shading_loss: expected pred and target (B, 1, H, W), got {tuple(pred.shape)} and "
                         f"{tuple(target.shape)}")
    pred, target = pred.float(), target.float()
    m = as_mask(mask, pred)
    l1 = masked_mean((pred - target).abs(), m)
    gradient = pred.new_zeros(())
    for (d_pred, pair), (d_target, _) in zip(finite_differences(pred, m), finite_differences(target, m)):
        gradient = gradient + masked_mean((d_pred - d_target).abs(), pair)
    return {"l1": l1, "gradient": gradient, "loss": l1 + gradient_weight * gradient}
