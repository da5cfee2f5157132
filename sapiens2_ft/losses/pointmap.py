"""Pointmap (per-pixel XYZ in camera space) loss, after the upstream Sapiens2 pointmap terms.

Every term is computed per sample on pointmaps divided by that sample's mean ground-truth depth,
clamped at ``TERM_CLAMP`` per sample, then averaged over the samples that have valid pixels.
Pointmaps are in the canonical camera space of ``canonical_pointmap`` (focal 768, Z scaled).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from sapiens2_ft.losses.normal import as_mask

TERM_CLAMP = 4.0
SILOG_LAMBDA = 0.85
DEFAULT_WEIGHTS = {
    "l1": 2.0, "multiscale_l1": 1.0, "shift_invariant_l1": 1.0, "silog": 1.0, "intrinsics": 1.0, "normal": 2.0,
    "scale": 4.0,
}  # fmt: skip


def _per_sample_mean(value: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-sample mean of value (B, C, H, W) over channels and valid pixels of mask (B, 1, H, W), and counts (B,)."""
    count = mask.sum(dim=(1, 2, 3))
    total = torch.where(mask > 0, value, 0.0).sum(dim=(1, 2, 3))
    return total / (count * value.shape[1]).clamp_min(1.0), count


def _reduce(per_sample: torch.Tensor, count: torch.Tensor) -> torch.Tensor:
    """Clamp each sample's term at TERM_CLAMP and average over the samples with valid pixels."""
    has = (count > 0).to(per_sample.dtype)
    return (per_sample.clamp(max=TERM_CLAMP) * has).sum() / has.sum().clamp_min(1.0)


def masked_l1(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-channel L1 over valid pixels, reduced over the batch."""
    return _reduce(*_per_sample_mean((pred - target).abs(), mask))


def multiscale_l1(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor, factors=(2, 4)) -> torch.Tensor:
    """L1 between masked averages over k x k blocks (k in ``factors``), averaged over the scales."""
    terms = []
    for k in factors:
        if min(pred.shape[-2:]) < k:
            continue
        pooled_mask = F.avg_pool2d(mask, k)
        denom = pooled_mask.clamp_min(1e-6)
        p = F.avg_pool2d(pred * mask, k) / denom
        t = F.avg_pool2d(target * mask, k) / denom
        terms.append(masked_l1(p, t, (pooled_mask > 0).to(mask.dtype)))
    return torch.stack(terms).mean() if terms else pred.sum() * 0.0


def masked_median(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-sample, per-channel median over valid pixels: x (B, C, H, W), mask (B, 1, H, W) -> (B, C, 1, 1)."""
    out = x.new_zeros(x.shape[0], x.shape[1], 1, 1)
    for b in range(x.shape[0]):
        valid = mask[b, 0] > 0
        if valid.any():
            out[b, :, 0, 0] = x[b][:, valid].median(dim=1).values
    return out


def shift_invariant_l1(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """L1 after subtracting each sample's masked median (per channel) from prediction and target."""
    return masked_l1(pred - masked_median(pred, mask), target - masked_median(target, mask), mask)


def silog(pred_z: torch.Tensor, target_z: torch.Tensor, mask: torch.Tensor, eps: float = 1e-4) -> torch.Tensor:
    """Variance-style SiLog on depth: mean(d^2) - lambda * mean(d)^2 with d = log(pred) - log(target)."""
    mask = mask * (target_z > eps).to(mask.dtype)
    d = torch.log(pred_z.clamp_min(eps)) - torch.log(target_z.clamp_min(eps))
    mean_sq, count = _per_sample_mean(d.pow(2), mask)
    mean, _ = _per_sample_mean(d, mask)
    return _reduce(mean_sq - SILOG_LAMBDA * mean.pow(2), count)


def pointmap_normals(points: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Unit normals (B, 3, H-1, W-1) from the cross product of forward differences, and their validity mask.

    A normal is valid when the pixel and its right and lower neighbours are valid and the cross
    product is not degenerate.
    """
    origin = points[..., :-1, :-1]
    dx = points[..., :-1, 1:] - origin
    dy = points[..., 1:, :-1] - origin
    normal = torch.cross(dx, dy, dim=1)
    valid = mask[..., :-1, :-1] * mask[..., :-1, 1:] * mask[..., 1:, :-1]
    return F.normalize(normal, dim=1, eps=1e-12), valid


def normal_consistency(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean 1 - cos between the pointmap-derived normals of prediction and target."""
    if min(pred.shape[-2:]) < 2:
        return pred.sum() * 0.0
    n_pred, _ = pointmap_normals(pred, mask)
    n_tgt, valid = pointmap_normals(target, mask)
    valid = valid * (n_tgt.norm(dim=1, keepdim=True) > 0.5).to(valid.dtype)
    return _reduce(*_per_sample_mean(1.0 - (n_pred * n_tgt).sum(1, keepdim=True), valid))


def intrinsics_consistency(points: torch.Tensor, intrinsics: torch.Tensor, focal: float, mask: torch.Tensor,
                           eps: float = 1e-4) -> torch.Tensor:
    """L1 between each point's ray (X/Z, Y/Z) and the ray of its pixel under the canonical camera.

    points (B, 3, H, W) canonical XYZ, intrinsics (B, 3, 3) of the image (cx, cy and fy/fx are kept,
    fx becomes ``focal``): pixel (row i, col j) sees the ray ((j - cx) / focal, (i - cy) / (focal fy / fx)).
    """
    h, w = points.shape[-2:]
    K = intrinsics.float()
    fy = (focal * K[:, 1, 1] / K[:, 0, 0]).view(-1, 1, 1)
    cols = torch.arange(w, device=points.device, dtype=torch.float32).view(1, 1, w)
    rows = torch.arange(h, device=points.device, dtype=torch.float32).view(1, h, 1)
    ray = torch.stack([((cols - K[:, 0, 2].view(-1, 1, 1)) / focal).expand(-1, h, w),
                       ((rows - K[:, 1, 2].view(-1, 1, 1)) / fy).expand(-1, h, w)], dim=1)
    z = points[:, 2:3]
    mask = mask * (z > eps).to(mask.dtype)
    return _reduce(*_per_sample_mean((points[:, :2] / z.clamp_min(eps) - ray).abs(), mask))


def pointmap_loss(
    pred: torch.Tensor,
    target: torch.Tensor,
    mask: torch.Tensor | None,
    pred_scale: torch.Tensor | None = None,
    target_scale: torch.Tensor | None = None,
    weights: dict[str, float] | None = None,
    intrinsics: torch.Tensor | None = None,
    canonical_focal: float = 768.0,
) -> dict[str, torch.Tensor]:
    """pred/target (B, 3, H, W) XYZ (Z = depth), mask (B, [1,] H, W) of valid pixels.

    Terms: ``l1``, ``multiscale_l1``, ``shift_invariant_l1``, ``silog``, ``normal``; ``intrinsics``
    (``intrinsics_consistency`` of pred, only when the (B, 3, 3) ``intrinsics`` are given); ``scale``
    (per-sample L1 of the predicted vs ground-truth scale, only when both scales are given).
    ``weights`` overrides entries of ``DEFAULT_WEIGHTS``. Returns the unweighted terms plus ``loss``.
    """
    if pred.shape != target.shape or pred.ndim != 4 or pred.shape[1] != 3:
        raise ValueError(
            f"pointmap_loss: expected pred and target (B, 3, H, W), got {tuple(pred.shape)} and {tuple(target.shape)}"
        )
    if (pred_scale is None) != (target_scale is None):
        raise ValueError("pointmap_loss: give both pred_scale and target_scale, or neither")
    unknown = set(weights or {}) - set(DEFAULT_WEIGHTS)
    if unknown:
        raise ValueError(f"pointmap_loss: unknown weight names {sorted(unknown)}; known: {sorted(DEFAULT_WEIGHTS)}")
    w = {**DEFAULT_WEIGHTS, **(weights or {})}
    pred, target = pred.float(), target.float()
    m = as_mask(mask, pred)
    target = torch.where(m > 0, target, 0.0)  # invalid pixels may hold NaN/garbage
    depth, _ = _per_sample_mean(target[:, 2:3], m)
    norm = depth.abs().clamp_min(1e-6).view(-1, 1, 1, 1)
    p, t = pred / norm, target / norm
    terms = {
        "l1": masked_l1(p, t, m),
        "multiscale_l1": multiscale_l1(p, t, m),
        "shift_invariant_l1": shift_invariant_l1(p, t, m),
        "silog": silog(p[:, 2:3], t[:, 2:3], m),
        "normal": normal_consistency(p, t, m),
    }
    if intrinsics is not None:
        terms["intrinsics"] = intrinsics_consistency(pred, intrinsics, canonical_focal, m)
    if pred_scale is not None:
        ps = torch.as_tensor(pred_scale, dtype=torch.float32, device=pred.device).reshape(pred.shape[0], -1)
        ts = torch.as_tensor(target_scale, dtype=torch.float32, device=pred.device).reshape(pred.shape[0], -1)
        terms["scale"] = (ps - ts).abs().mean(dim=1).clamp(max=TERM_CLAMP).mean()
    terms["loss"] = sum(w[name] * value for name, value in terms.items())
    return terms
