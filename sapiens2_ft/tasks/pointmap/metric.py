"""Pointmap (per-pixel XYZ, metres) metrics, reduced across processes by sums."""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor
from torchmetrics import Metric

from sapiens2_ft.tasks.dense_maps import angular_error_deg, flatten_mask, unit_vectors, vector_length
from sapiens2_ft.tasks.diagnostics import Bins, Diagnostics, error_histogram

THRESHOLDS_M = (0.05, 0.10, 0.20)
L2_BINS = Bins(2.0, 200)  # 1 cm bins up to 2 m; the last also counts larger errors


def forward_normals(points: Tensor, mask: Tensor) -> tuple[Tensor, Tensor]:
    """Unit normals (B, 3, H-1, W-1) from the cross product of forward differences, and their validity mask
    (B, 1, H-1, W-1): the pixel and its right and lower neighbours are valid."""
    origin = points[..., :-1, :-1]
    normal = torch.cross(points[..., :-1, 1:] - origin, points[..., 1:, :-1] - origin, dim=1)
    valid = mask[..., :-1, :-1] * mask[..., :-1, 1:] * mask[..., 1:, :-1]
    return unit_vectors(normal, dim=1, eps=1e-12), valid


class PointmapMetrics(Metric):
    """Over valid pixels: mean L2 distance (m), per-axis MAE (m), RMSE of the L2 distance (m),
    % of pixels with L2 distance < 5 / 10 / 20 cm, and the mean angle (degrees) between the normals
    derived from the predicted and ground-truth pointmaps (cross product of forward differences,
    where the pixel and its right and lower neighbours are valid). The pointmap task feeds it as upstream's
    evaluator compares: the canonical prediction against the canonical ground truth (made with the image's own
    intrinsics), both brought to metres by the image's own scale; ``scale`` (each image's 768 / fx) adds
    ``l2_canonical``, that L2 in upstream's canonical units. ``predicted_focal`` (the prediction made metric with
    the focal the model predicts, as ``predict`` without ``--focal``) adds ``l2_predicted_focal``.
    ``diagnostics()``: the ``l2_error`` histogram (``L2_BINS``, a sum-reduced state; ``l2_counts`` of the latest
    ``compute``).
    """

    is_differentiable = False
    higher_is_better = False
    full_state_update = False

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        zero = torch.zeros((), dtype=torch.float64)
        for name in ("count", "sum_l2", "sum_sq_l2", "normal_count", "sum_normal_angle", "predicted_count",
                     "sum_l2_predicted", "canonical_count", "sum_l2_canonical"):
            self.add_state(name, default=zero.clone(), dist_reduce_fx="sum")
        self.add_state("sum_abs_xyz", default=torch.zeros(3, dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("within", default=torch.zeros(len(THRESHOLDS_M), dtype=torch.float64), dist_reduce_fx="sum")
        self.add_state("l2_histogram", default=torch.zeros(L2_BINS.count, dtype=torch.int64), dist_reduce_fx="sum")
        self.l2_counts = torch.zeros(L2_BINS.count, dtype=torch.int64)
        self.l2_summary = ""

    def update(self, pred: Tensor, target: Tensor, mask: Tensor | None = None,
               predicted_focal: Tensor | None = None, scale: Tensor | None = None) -> None:
        """pred/target (B, 3, H, W) XYZ in metres, mask (B, [1,] H, W) of valid pixels; ``predicted_focal``
        (B, 3, H, W) another prediction in metres (by the predicted focal); ``scale`` (B,) each image's canonical
        scale (768 / fx), for ``l2_canonical``."""
        if pred.shape != target.shape or pred.ndim != 4 or pred.shape[1] != 3:
            raise ValueError(
                f"PointmapMetrics: expected pred and target (B, 3, H, W), "
                f"got {tuple(pred.shape)} and {tuple(target.shape)}"
            )
        if predicted_focal is not None and predicted_focal.shape != pred.shape:
            raise ValueError(f"PointmapMetrics: predicted_focal is {tuple(predicted_focal.shape)}, pred "
                             f"{tuple(pred.shape)}")
        valid = flatten_mask(mask, pred)
        if predicted_focal is not None:
            other = (predicted_focal.double() - target.double()).permute(0, 2, 3, 1)[valid].to(self.device)
            self.predicted_count += len(other)
            self.sum_l2_predicted += vector_length(other, dim=1)[:, 0].sum()
        if scale is not None:
            per_pixel = scale.double().reshape(-1, 1, 1).expand(valid.shape)[valid].to(self.device)
            canonical = (pred.double() - target.double()).permute(0, 2, 3, 1)[valid].to(self.device)
            self.canonical_count += len(canonical)
            self.sum_l2_canonical += (vector_length(canonical, dim=1)[:, 0] * per_pixel).sum()
        diff = (pred.double() - target.double()).permute(0, 2, 3, 1)[valid].to(self.device)  # (N, 3)
        l2 = vector_length(diff, dim=1)[:, 0]
        self.count += l2.numel()
        self.sum_l2 += l2.sum()
        self.sum_sq_l2 += l2.pow(2).sum()
        self.sum_abs_xyz += diff.abs().sum(0)
        self.within += torch.stack([(l2 < t).sum() for t in THRESHOLDS_M]).double()
        self.l2_histogram += L2_BINS.counts(l2)
        if min(pred.shape[-2:]) >= 2:
            m = valid.unsqueeze(1).double()
            n_pred, _ = forward_normals(pred.double(), m)
            n_tgt, ok = forward_normals(torch.where(valid.unsqueeze(1), target.double(), 0.0), m)
            ok = (ok[:, 0] > 0) & (vector_length(n_tgt)[:, 0] > 0.5)
            angle = angular_error_deg(n_pred, n_tgt)[ok].to(self.device)
            self.normal_count += angle.numel()
            self.sum_normal_angle += angle.sum()

    def compute(self) -> dict[str, Tensor]:
        """``l2``, ``mae_{x,y,z}``, ``rmse`` (m); ``within_{5,10,20}cm`` (%); ``normal_angle`` (deg);
        ``l2_canonical`` and ``l2_predicted_focal`` where ``update`` had their inputs."""
        n = self.count.clamp_min(1.0)
        out = {"l2": self.sum_l2 / n}
        for axis, value in zip("xyz", self.sum_abs_xyz / n):
            out[f"mae_{axis}"] = value
        out["rmse"] = (self.sum_sq_l2 / n).sqrt()
        for t, k in zip(THRESHOLDS_M, self.within):
            out[f"within_{round(t * 100)}cm"] = 100.0 * k / n
        out["normal_angle"] = self.sum_normal_angle / self.normal_count.clamp_min(1.0)
        if self.canonical_count > 0:
            out["l2_canonical"] = self.sum_l2_canonical / self.canonical_count
        if self.predicted_count > 0:
            out["l2_predicted_focal"] = self.sum_l2_predicted / self.predicted_count
        self.l2_counts = self.l2_histogram.detach().cpu().clone()
        self.l2_summary = f"{int(self.count)} pixels, mean {float(out['l2']):.3f} m"
        return out

    def diagnostics(self) -> Diagnostics:
        return error_histogram("l2_error", L2_BINS, self.l2_counts,
                               f"L2 error (m; the last bin counts all >= {L2_BINS.edges()[-2]:g} m)",
                               f"pointmap L2 error: {self.l2_summary}", log_y=True)
