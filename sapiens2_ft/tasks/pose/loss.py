"""Pose heatmap losses.

``weighted_heatmap_mse`` is the upstream loss (fine-tuning a pretrained model).
``heatmap_cross_entropy`` treats each keypoint's heatmap as a distribution over pixels; a tiny
model trained from random init escapes the all-zero solution of MSE with it, so the CPU demo uses it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F


def weighted_heatmap_mse(pred: torch.Tensor, target: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Mean over (B, K, H, W) of ``w_k * (pred - target)^2``; pred/target (B, K, H, W), weights (B, K)."""
    if pred.shape != target.shape:
        raise ValueError(f"heatmap shapes differ: prediction {tuple(pred.shape)} vs target {tuple(target.shape)}")
    squared = (pred.float() - target.float()).pow(2).mean(dim=(-2, -1))
    return (squared * weights.float()).mean()


def heatmap_cross_entropy(pred: torch.Tensor, target: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Soft-target cross-entropy over each heatmap's pixels, averaged over weighted keypoints."""
    if pred.shape != target.shape:
        raise ValueError(f"heatmap shapes differ: prediction {tuple(pred.shape)} vs target {tuple(target.shape)}")
    log_prob = F.log_softmax(pred.float().flatten(-2), dim=-1)
    dist = target.float().flatten(-2)
    dist = dist / dist.sum(-1, keepdim=True).clamp_min(1e-12)
    per_keypoint = -(dist * log_prob).sum(-1)
    w = weights.float()
    return (per_keypoint * w).sum() / w.sum().clamp_min(1.0)
