"""Surface-normal loss of the Sapiens2 recipe: cosine + L1 + finite-difference gradient matching."""

from __future__ import annotations

import torch

from sapiens2_ft.tasks.dense_maps import as_mask, finite_differences, masked_mean, unit_vectors


def normal_loss(
    pred: torch.Tensor,
    target: torch.Tensor,
    mask: torch.Tensor | None,
    cos_weight: float = 10.0,
    l1_weight: float = 1.0,
    grad_weight: float = 10.0,
) -> dict[str, torch.Tensor]:
    """pred raw (B, 3, H, W), target unit normals (B, 3, H, W), mask (B, [1,] H, W) of valid pixels.

    Returns ``{"cos", "l1", "grad", "loss"}`` as upstream (``dense/src/models/losses/normal_loss.py``,
    ``l1_loss.py``), each a mean over valid pixels: ``cos`` = 1 - cos(pred, target) of the normalised
    vectors; ``l1`` = sum over the 3 channels of |pred - target| (raw pred); ``grad`` = the same for the
    squared error of the x-differences of the raw pred vs the target's, over pairs of valid pixels, plus
    that of the y-differences. Invalid target pixels may hold anything (NaN included).
    """
    if pred.shape != target.shape or pred.ndim != 4 or pred.shape[1] != 3:
        raise ValueError(
            f"normal_loss: expected pred and target (B, 3, H, W), got {tuple(pred.shape)} and {tuple(target.shape)}"
        )
    pred, target = pred.float(), target.float()
    m = as_mask(mask, pred)
    target = torch.where(m > 0, target, 0.0)  # invalid pixels may hold NaN/garbage
    cosine = (unit_vectors(pred, dim=1, eps=1e-6) * unit_vectors(target, dim=1, eps=1e-6)).sum(1, keepdim=True)
    cos = masked_mean(1.0 - cosine, m)
    l1 = masked_mean((pred - target).abs().sum(1, keepdim=True), m)
    grad = pred.new_zeros(())
    for (d_pred, pair), (d_tgt, _) in zip(finite_differences(pred, m), finite_differences(target, m)):
        grad = grad + masked_mean((d_pred - d_tgt).square().sum(1, keepdim=True), pair)
    return {"cos": cos, "l1": l1, "grad": grad, "loss": cos_weight * cos + l1_weight * l1 + grad_weight * grad}
