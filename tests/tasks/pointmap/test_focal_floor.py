"""bench/pointmap_focal_floor.py: the focal-blind L2 floor is what the pointmap metric gives a perfect canonical
pointmap brought to metres (``to_metric``) with the best single guessed focal."""

from __future__ import annotations

import torch

from sapiens2_ft.tasks.pointmap.metric import PointmapMetrics
from sapiens2_ft.tasks.pointmap.module import to_metric
from tool_scripts import load_tool

CANONICAL_FOCAL = 768.0


def _metric_l2(points: list[torch.Tensor], focals: torch.Tensor, guess: float) -> float:
    """PointmapMetrics' L2 of each image's true canonical pointmap made metric with the scale of ``guess``."""
    metric = PointmapMetrics()
    for p, f in zip(points, focals):
        canonical = p * (CANONICAL_FOCAL / f)  # the canonical camera's points: scale = 768 / fx
        metric.update(to_metric(canonical[None], torch.tensor([CANONICAL_FOCAL / guess])), p[None])
    return float(metric.compute()["l2"])


def test_floor_is_the_metric_at_the_best_constant_focal():
    floor_of = load_tool("pointmap_focal_floor", "bench").focal_blind_floor
    gen = torch.Generator().manual_seed(0)
    points = [torch.randn(3, 8, 6, generator=gen, dtype=torch.float64) + torch.tensor([0, 0, 3.0]).view(3, 1, 1)
              for _ in range(5)]
    focals = torch.tensor([230.0, 260.0, 330.0, 400.0, 435.0], dtype=torch.float64)
    floor, guess = floor_of([p.reshape(3, -1).norm(dim=0) for p in points], focals)
    # The error is piecewise linear in the guess with its kinks at the true focals: the best guess is one of them,
    # and between or beyond them the error is no lower.
    at_focals = [_metric_l2(points, focals, float(g)) for g in focals]
    assert abs(min(at_focals) - floor) < 1e-6 and abs(_metric_l2(points, focals, guess) - floor) < 1e-6
    assert all(_metric_l2(points, focals, g) >= floor - 1e-6 for g in (200.0, 245.0, 300.0, 365.0, 420.0, 500.0))
    assert floor > 0.05  # five focals, one guess: a real error, not zero
