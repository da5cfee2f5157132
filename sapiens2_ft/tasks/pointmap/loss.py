"""Pointmap (per-pixel canonical XYZ) loss: the terms of the upstream Sapiens2 pointmap head.

Pointmaps are in the canonical camera of ``canonical_pointmap`` (X, Y and Z multiplied by
``scale = 768 / fx``). As upstream (``dense/src/models/heads/pointmap_head.py`` and its losses):

- ``l1``, ``multiscale_l1`` and ``shift_invariant_l1`` see prediction and target divided by each
  sample's mean ground-truth canonical depth; in the total, ``weight x term`` is clamped at ``TERM_CLAMP``.
- ``silog`` acts on the raw canonical Z, per sample, then averaged over the samples.
- ``intrinsics`` acts on the raw canonical prediction (canonical metres) with the image's own K.
- ``normal`` compares normals of pointmap / true scale (metric points).
- Pixel means pool the batch: the sum over every valid pixel of every sample (and over the 3 channels
  for the XYZ terms) divided by the number of valid pixels in the batch.
- The target is 0 outside the mask; the prediction there is used as it is where it enters the border of
  the mask (bilinear upsampling of ``multiscale_l1``, right / lower neighbours of ``normal``).

Deviations, for robustness only (identical values on finite inputs with valid pixels): non-finite values
are not zeroed (upstream's ``nan_to_num``), so the trainer's non-finite guard sees them; SiLog leaves out
samples without valid pixels (upstream filters such samples in its data pipeline) and its square root
has a zero gradient below 1e-12 instead of an infinite one.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from sapiens2_ft.tasks.dense_maps import as_mask, vector_length

TERM_CLAMP = 4.0  # on weight x term, for CLAMPED_TERMS
CLAMPED_TERMS = ("l1", "multiscale_l1", "shift_invariant_l1")
MULTISCALE_FACTOR = 2  # bilinear upsampling of the multiscale term (upstream configs: scale_factor=2)
SILOG_LAMBDA = 0.5
LOG_CLAMP = 1e-4  # depths are clamped here before the log
NORMAL_AMPLIFICATION = 100.0  # finite differences are multiplied by this before the cross product
NORMAL_EPS = 1e-6  # a normal exists where |cross product| exceeds this
DEFAULT_WEIGHTS = {
    "l1": 2.0, "multiscale_l1": 1.0, "shift_invariant_l1": 1.0, "silog": 1.0, "intrinsics": 1.0, "normal": 2.0,
    "scale": 4.0,
}  # fmt: skip


def pixel_mean(value: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum of ``value`` (B, C, H, W) over its channels, averaged over the valid pixels of the whole batch."""
    return torch.where(mask > 0, value, 0.0).sum() / mask.sum().clamp_min(1.0)


def masked_l1(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """L1 summed over channels, mean over the batch's valid pixels."""
    return pixel_mean((pred - target).abs(), mask)


def multiscale_l1(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor,
                  factor: int = MULTISCALE_FACTOR) -> torch.Tensor:
    """``masked_l1`` after bilinear upsampling of prediction and target by ``factor`` (nearest for the mask)."""
    def up(x: torch.Tensor) -> torch.Tensor:
        return F.interpolate(x, scale_factor=factor, mode="bilinear", align_corners=False)

    return masked_l1(up(pred), up(target), F.interpolate(mask, scale_factor=factor, mode="nearest"))


def masked_centroid(points: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per-sample mean point over the valid pixels: (B, 3, H, W) -> (B, 3, 1, 1) (upstream's +1e-6 denominator)."""
    total = torch.where(mask > 0, points, 0.0).sum(dim=(2, 3), keepdim=True)
    return total / (mask.sum(dim=(2, 3), keepdim=True) + 1e-6)


def shift_invariant_l1(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """``masked_l1`` after subtracting each sample's masked centroid from prediction and target."""
    return masked_l1(pred - masked_centroid(pred, mask), target - masked_centroid(target, mask), mask)


def silog(pred_z: torch.Tensor, target_z: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Per sample sqrt(mean(d^2) - 0.5 mean(d)^2), d = log(target) - log(pred) on valid pixels; mean of samples."""
    d = torch.log(target_z.clamp_min(LOG_CLAMP)) - torch.log(pred_z.clamp_min(LOG_CLAMP))
    d = torch.where(mask > 0, d, 0.0).flatten(1)
    count = mask.flatten(1).sum(dim=1)
    mean_sq = d.pow(2).sum(dim=1) / count.clamp_min(LOG_CLAMP)
    mean = d.sum(dim=1) / count.clamp_min(LOG_CLAMP)
    per_sample = (mean_sq - SILOG_LAMBDA * mean.pow(2)).clamp_min(1e-12).sqrt()
    has = (count > 0).to(per_sample.dtype)
    return (per_sample * has).sum() / has.sum().clamp_min(1.0)


def intrinsics_consistency(points: torch.Tensor, intrinsics: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """|X - (u - cx) Z / fx| + |Y - (v - cy) Z / fy| over the batch's valid pixels (same units as ``points``).

    points (B, 3, H, W) canonical XYZ; intrinsics (B, 3, 3) K of the image (not the canonical one: the
    canonical rescale keeps X/Z and Y/Z). Pixel (row v, column u).
    """
    h, w = points.shape[-2:]
    K = intrinsics.to(points.dtype)
    fx, fy, cx, cy = (K[:, i, j].view(-1, 1, 1) for i, j in ((0, 0), (1, 1), (0, 2), (1, 2)))
    u = torch.arange(w, device=points.device, dtype=points.dtype).view(1, 1, w)
    v = torch.arange(h, device=points.device, dtype=points.dtype).view(1, h, 1)
    x, y, z = points[:, 0], points[:, 1], points[:, 2]
    residual = (x - (u - cx) * z / fx).abs() + (y - (v - cy) * z / fy).abs()
    return pixel_mean(residual.unsqueeze(1), mask)


def pointmap_normals(points: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Unit normals (B, 3, H, W) of a pointmap and where they exist (B, 1, H, W), as upstream's normal term.

    Right and lower differences on the reflect-padded map (the last column / row looks back), times
    ``NORMAL_AMPLIFICATION``, crossed; a normal exists on a valid pixel whose cross product is longer than
    ``NORMAL_EPS``, and is zero elsewhere.
    """
    padded = F.pad(points, (1, 1, 1, 1), mode="reflect")
    centre = padded[..., 1:-1, 1:-1]
    dx = (padded[..., 1:-1, 2:] - centre) * NORMAL_AMPLIFICATION
    dy = (padded[..., 2:, 1:-1] - centre) * NORMAL_AMPLIFICATION
    (ax, ay, az), (bx, by, bz) = dx.unbind(1), dy.unbind(1)
    # the cross product written out: equal differences (both neighbours outside the mask) give exactly 0,
    # where torch.cross's fused multiply-adds can leave a rounding residue above NORMAL_EPS
    normal = torch.stack([ay * bz - az * by, az * bx - ax * bz, ax * by - ay * bx], dim=1)
    exists = (vector_length(normal) > NORMAL_EPS) & (mask > 0)
    return normal / vector_length(normal, eps=NORMAL_EPS) * exists, exists


def normal_consistency(pred: torch.Tensor, target: torch.Tensor, mask: torch.Tensor,
                       scale: torch.Tensor) -> torch.Tensor:
    """(1 - cos) + mean over channels |n_pred - n_target| of ``pointmap_normals`` of pointmap / ``scale`` (B,),
    averaged over the pixels where the target's normal exists (a missing predicted normal counts as zero)."""
    if min(pred.shape[-2:]) < 2:  # no neighbours to differentiate
        return pred.sum() * 0.0
    s = scale.reshape(-1, 1, 1, 1)
    n_pred, _ = pointmap_normals(pred / s, mask)
    n_tgt, exists = pointmap_normals(target / s, mask)
    cos = (n_pred * n_tgt).sum(dim=1, keepdim=True).clamp(-1.0, 1.0)
    per_pixel = (1.0 - cos) + (n_pred - n_tgt).abs().mean(dim=1, keepdim=True)
    return pixel_mean(per_pixel, exists.to(per_pixel.dtype))


def pointmap_loss(
    pred: torch.Tensor,
    target: torch.Tensor,
    mask: torch.Tensor | None,
    pred_scale: torch.Tensor | None = None,
    target_scale: torch.Tensor | None = None,
    weights: dict[str, float] | None = None,
    intrinsics: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """pred/target (B, 3, H, W) canonical XYZ (Z = depth), mask (B, [1,] H, W) of valid pixels.

    Terms: ``l1``, ``multiscale_l1``, ``shift_invariant_l1``, ``silog``, ``normal`` (on pointmap /
    ``target_scale``, the true scales (B,); 1 when not given); ``intrinsics`` (only when the image's
    (B, 3, 3) ``intrinsics`` are given); ``scale`` (mean L1 of ``pred_scale`` vs ``target_scale``, only
    when both are given). ``weights`` overrides entries of ``DEFAULT_WEIGHTS``. Returns the unweighted,
    unclamped terms plus ``loss`` = sum of weight x term, that product clamped at ``TERM_CLAMP`` for
    ``CLAMPED_TERMS``.
    """
    if pred.shape != target.shape or pred.ndim != 4 or pred.shape[1] != 3:
        raise ValueError(
            f"pointmap_loss: expected pred and target (B, 3, H, W), got {tuple(pred.shape)} and {tuple(target.shape)}"
        )
    if pred_scale is not None and target_scale is None:
        raise ValueError("pointmap_loss: pred_scale needs target_scale (the true scales)")
    unknown = set(weights or {}) - set(DEFAULT_WEIGHTS)
    if unknown:
        raise ValueError(f"pointmap_loss: unknown weight names {sorted(unknown)}; known: {sorted(DEFAULT_WEIGHTS)}")
    w = {**DEFAULT_WEIGHTS, **(weights or {})}
    b = pred.shape[0]
    pred, target = pred.float(), target.float()
    m = as_mask(mask, pred)
    target = torch.where(m > 0, target, 0.0)  # invalid pixels are 0 (as upstream's targets); may hold NaN here
    count = m.sum(dim=(1, 2, 3), keepdim=True)
    mean_depth = target[:, 2:3].sum(dim=(1, 2, 3), keepdim=True) / count.clamp_min(1.0)
    mean_depth = torch.where(count > 0, mean_depth.clamp_min(1e-6), 1.0)
    p, t = pred / mean_depth, target / mean_depth
    true_scale = pred.new_ones(b) if target_scale is None else torch.as_tensor(
        target_scale, dtype=torch.float32, device=pred.device).reshape(b)
    terms = {
        "l1": masked_l1(p, t, m),
        "multiscale_l1": multiscale_l1(p, t, m),
        "shift_invariant_l1": shift_invariant_l1(p, t, m),
        "silog": silog(pred[:, 2:3], target[:, 2:3], m),
        "normal": normal_consistency(pred, target, m, true_scale),
    }
    if intrinsics is not None:
        terms["intrinsics"] = intrinsics_consistency(pred, intrinsics.float(), m)
    if pred_scale is not None:
        ps = torch.as_tensor(pred_scale, dtype=torch.float32, device=pred.device).reshape(b)
        terms["scale"] = (ps - true_scale).abs().mean()
    weighted = {name: w[name] * value for name, value in terms.items()}
    terms["loss"] = sum(v.clamp(max=TERM_CLAMP) if k in CLAMPED_TERMS else v for k, v in weighted.items())
    return terms
