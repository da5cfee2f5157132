"""bench/pointmap_focal_floor.py: the focal-blind L2 floor equals what the pointmap metric gives the true points
rescaled by one guessed focal, and no other focal of the sweep does better."""

from __future__ import annotations

import torch

from sapiens2_ft.tasks.pointmap.metric import PointmapMetrics
from tool_scripts import load_tool


def _metric_l2(points: list[torch.Tensor], focals: torch.Tensor, guess: float) -> float:
    """PointmapMetrics' L2 of each image's true points (3, H, W) scaled by guess / its focal."""
    metric = PointmapMetrics()
    for p, f in zip(points, focals):
        metric.update((p * (guess / f))[None], p[None])
    return float(metric.compute()["l2"])


def test_floor_is_the_metric_at_the_best_constant_focal():
    floor_of = load_tool("pointmap_focal_floor", "bench").focal_blind_floor
    gen = torch.Generator().manual_seed(0)
    points = [torch.randn(3, 8, 6, generator=gen, dtype=torch.float64) + torch.tensor([0, 0, 3.0]).view(3, 1, 1)
              for _ in range(5)]
    focals = torch.tensor([230.0, 260.0, 330.0, 400.0, 435.0], dtype=torch.float64)
    floor, guess = floor_of([p.reshape(3, -1).norm(dim=0) for p in points], focals, steps=401)
    assert abs(_metric_l2(points, focals, guess) - floor) < 1e-5
    grid = torch.linspace(230.0, 435.0, 401).tolist()
    assert floor <= min(_metric_l2(points, focals, g) for g in grid) + 1e-5
    assert floor > 0.05  # five focals, one guess: a real error, not zero
