"""UDP Gaussian heatmap codec: batched, device-agnostic torch encode/decode.

Conventions (UDP, Huang et al. 2020): coordinates are continuous pixel
coordinates whose integer values sit on pixel centres, and input <-> heatmap
scaling maps the first/last pixel centres onto each other, i.e.
``x_hm = x_in * (W_hm - 1) / (W_in - 1)``. Sizes are always ``(H, W)``;
coordinates are always ``(x, y)``.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

__all__ = [
    "input_to_heatmap_coords",
    "heatmap_to_input_coords",
    "encode_heatmaps",
    "decode_heatmaps",
    "flip_heatmaps",
    "heatmap_probabilities",
    "window_mass",
    "keypoint_scores",
]

# Same lower/upper clip as DARK-UDP, applied after normalising the blurred
# neighbourhood by its max (so the lower clip is relative to the peak).
_LOG_CLIP = (1e-3, 50.0)
_EPS = float(torch.finfo(torch.float32).eps)


def _check_size(size: Sequence[int], name: str, min_value: int = 1) -> tuple[int, int]:
    if len(size) != 2 or any(int(s) != s or s < min_value for s in size):
        raise ValueError(f"{name} must be (H, W) integers >= {min_value}, got {tuple(size)}")
    return int(size[0]), int(size[1])


def _scale_xy(coords, sx: float, sy: float):
    if isinstance(coords, Tensor):
        if not coords.is_floating_point():
            coords = coords.float()
        if coords.shape[-1] != 2:
            raise ValueError(f"coords must have shape (..., 2), got {tuple(coords.shape)}")
        return coords * coords.new_tensor([sx, sy])
    coords = np.asarray(coords)
    if coords.dtype.kind != "f":
        coords = coords.astype(np.float32)
    if coords.shape[-1] != 2:
        raise ValueError(f"coords must have shape (..., 2), got {coords.shape}")
    return coords * np.array([sx, sy], dtype=coords.dtype)


def input_to_heatmap_coords(coords, input_size, heatmap_size):
    """UDP scale: x * (W_hm-1)/(W_in-1), y * (H_hm-1)/(H_in-1).

    ``coords`` (..., 2) xy in input-image px (Tensor or array); sizes (H, W), each >= 2.
    """
    h_in, w_in = _check_size(input_size, "input_size", 2)
    h_hm, w_hm = _check_size(heatmap_size, "heatmap_size", 2)
    return _scale_xy(coords, (w_hm - 1) / (w_in - 1), (h_hm - 1) / (h_in - 1))


def heatmap_to_input_coords(coords, input_size, heatmap_size):
    """Inverse of :func:`input_to_heatmap_coords` (heatmap px -> input px)."""
    h_in, w_in = _check_size(input_size, "input_size", 2)
    h_hm, w_hm = _check_size(heatmap_size, "heatmap_size", 2)
    return _scale_xy(coords, (w_in - 1) / (w_hm - 1), (h_in - 1) / (h_hm - 1))


def encode_heatmaps(
    keypoints: Tensor,
    weights: Tensor,
    heatmap_size: Sequence[int],
    sigma: float,
    dtype: torch.dtype = torch.float32,
    out: Tensor | None = None,
) -> tuple[Tensor, Tensor]:
    """Render UDP Gaussian target heatmaps.

    keypoints (..., K, 2) xy in heatmap px (float), weights (..., K) (visibility,
    0/1 or float). Returns heatmaps (..., K, H, W) in ``dtype`` and target weights
    (..., K) float32.

    Each channel is the unnormalised Gaussian exp(-((x-mu_x)^2+(y-mu_y)^2)/(2 sigma^2))
    at integer pixel centres with the exact float mu, truncated to the square window
    |p - round(mu)| <= floor(3 sigma) per axis (round = floor(v + 0.5)); computed as the
    outer product of 1-D x and y profiles. A channel is rendered iff its weight is > 0,
    mu is finite and at least one window pixel lies in the map; otherwise the channel is
    all zero and its target weight 0 (this window test is upstream's codec rule). Upstream
    zeroes a keypoint earlier, where it leaves the crop (input x outside [0, W_in), y outside
    [0, H_in)); the top-down dataset does that, so such keypoints arrive here with weight 0.
    Rendered channels keep their input weight (the heatmap peak is not scaled by it). Pass
    ``out`` (shape (..., K, H, W), ``dtype``) to write into a preallocated buffer.
    """
    if keypoints.shape[-1:] != (2,) or keypoints.dim() < 2:
        raise ValueError(f"keypoints must have shape (..., K, 2), got {tuple(keypoints.shape)}")
    if tuple(weights.shape) != tuple(keypoints.shape[:-1]):
        raise ValueError(
            f"weights shape {tuple(weights.shape)} must equal keypoints.shape[:-1] "
            f"{tuple(keypoints.shape[:-1])}"
        )
    if not sigma > 0:
        raise ValueError(f"sigma must be > 0, got {sigma}")
    h, w = _check_size(heatmap_size, "heatmap_size")
    radius = math.floor(3 * sigma)
    device = keypoints.device

    kpt = keypoints.to(torch.float32)
    wgt = weights.to(torch.float32)
    finite = torch.isfinite(kpt).all(dim=-1)
    kpt = torch.where(finite[..., None], kpt, torch.zeros((), device=device))
    mu_x, mu_y = kpt[..., 0:1], kpt[..., 1:2]  # (..., K, 1)
    c_x, c_y = torch.floor(mu_x + 0.5), torch.floor(mu_y + 0.5)

    # Window [c - r, c + r] overlaps [0, size - 1] on both axes.
    inside = ((c_x + radius >= 0) & (c_x - radius <= w - 1)
              & (c_y + radius >= 0) & (c_y - radius <= h - 1)).squeeze(-1)
    keep = inside & finite & (wgt > 0)

    inv = -0.5 / (sigma * sigma)
    xs = torch.arange(w, device=device, dtype=torch.float32)
    ys = torch.arange(h, device=device, dtype=torch.float32)
    gx = torch.exp((xs - mu_x) ** 2 * inv)  # (..., K, W)
    gy = torch.exp((ys - mu_y) ** 2 * inv)  # (..., K, H)
    zero = torch.zeros((), device=device)
    gx = torch.where(((xs - c_x).abs() <= radius) & keep[..., None], gx, zero)
    gy = torch.where((ys - c_y).abs() <= radius, gy, zero)

    gy, gx = gy.to(dtype)[..., :, None], gx.to(dtype)[..., None, :]
    if out is None:
        heatmaps = gy * gx
    else:
        expected = (*keypoints.shape[:-1], h, w)
        if tuple(out.shape) != expected or out.dtype != dtype:
            raise ValueError(f"out must be {expected} {dtype}, got {tuple(out.shape)} {out.dtype}")
        heatmaps = torch.mul(gy, gx, out=out)
    return heatmaps, torch.where(keep, wgt, zero)


def _blur_matrix(kernel_size: int, device: torch.device) -> Tensor:
    """(k+2, 3) banded matrix G: patch (k+2)x(k+2) -> G^T @ patch @ G = blur at 3x3 centre."""
    # cv2.getGaussianKernel(k, 0) sigma rule; cv2's fixed tables for small k are not copied.
    sigma = 0.3 * ((kernel_size - 1) * 0.5 - 1) + 0.8
    t = torch.arange(kernel_size, dtype=torch.float32, device=device) - kernel_size // 2
    g = torch.exp(-(t * t) / (2 * sigma * sigma))
    g = g / g.sum()
    return torch.stack([torch.nn.functional.pad(g, (c, 2 - c)) for c in range(3)], dim=1)


def decode_heatmaps(
    heatmaps: Tensor, blur_kernel_size: int = 11, max_step: float | None = None
) -> tuple[Tensor, Tensor]:
    """Heatmaps (..., K, H, W) -> keypoints (..., K, 2) xy heatmap px, scores (..., K) = max.

    Argmax (first occurrence in row-major order), then one DARK-UDP Newton step on
    the log of the Gaussian-blurred map (cv2 kernel for ``blur_kernel_size``, zero
    padding outside the map as in DARK-UDP). The blur is evaluated only at the 3x3
    neighbourhood of the argmax, from a (k+2)x(k+2) gathered patch; that 3x3 is
    normalised by its max, clipped to [1e-3, 50] and logged (so the result does not
    depend on the heatmap's absolute scale), edge-padded at the map border, and the
    step x -= H^-1 g uses central differences (symmetric 4-point cross term).

    A finite step is taken if it is <= 1 px per axis, or <= ``max_step`` px per axis
    when the log-map Hessian is negative definite (a genuine peak; default max_step
    is the blur radius (k-1)/2, since a noisy argmax of a sigma-6 map is often > 1 px
    off and DARK recovers it; ``max_step=1`` gives a strict 1 px bound). Otherwise the
    argmax is returned. Channels with max <= 0 return the argmax and their
    (non-positive) max. Any float dtype/device; float32 output.
    """
    if heatmaps.dim() < 3:
        raise ValueError(f"heatmaps must have shape (..., K, H, W), got {tuple(heatmaps.shape)}")
    if not heatmaps.is_floating_point():
        raise TypeError(f"heatmaps must be floating point, got {heatmaps.dtype}")
    if blur_kernel_size < 1 or blur_kernel_size % 2 == 0:
        raise ValueError(f"blur_kernel_size must be odd and >= 1, got {blur_kernel_size}")
    if max_step is None:
        max_step = (blur_kernel_size - 1) / 2
    *lead, h, w = heatmaps.shape
    if h == 0 or w == 0:
        raise ValueError(f"heatmaps must be non-empty, got H={h}, W={w}")
    device = heatmaps.device
    hm = heatmaps.reshape(-1, h, w)
    n = hm.shape[0]

    # Two-stage argmax (row maxima, then the winning row) is one vectorised pass
    # over the maps and gives the same first-occurrence index as a flat argmax.
    row_max = hm.amax(dim=2)  # (N, H)
    y = row_max.argmax(dim=1)  # (N,)
    idx_n = torch.arange(n, device=device)
    x = hm[idx_n, y].argmax(dim=1)  # (N,)
    scores = row_max[idx_n, y].float()

    # Gather (k+2)x(k+2) patch around the argmax; out-of-map pixels are zero.
    p = blur_kernel_size // 2 + 1
    off = torch.arange(-p, p + 1, device=device)
    rows, cols = y[:, None] + off, x[:, None] + off  # (N, k+2)
    r_ok, c_ok = (rows >= 0) & (rows < h), (cols >= 0) & (cols < w)
    flat = rows.clamp(0, h - 1)[:, :, None] * w + cols.clamp(0, w - 1)[:, None, :]
    patch = hm.reshape(n, h * w).gather(1, flat.reshape(n, -1)).reshape(flat.shape).float()
    patch = torch.where(r_ok[:, :, None] & c_ok[:, None, :], patch, torch.zeros((), device=device))

    g = _blur_matrix(blur_kernel_size, device)
    blur = g.T @ patch @ g  # (N, 3, 3); [a, b] <-> offset (dy, dx) = (a - 1, b - 1)

    # Edge padding: neighbours outside the map take the border value.
    nb = torch.arange(-1, 2, device=device)
    ri = ((y[:, None] + nb).clamp(0, h - 1) - y[:, None] + 1)[:, :, None].expand(n, 3, 3)
    ci = ((x[:, None] + nb).clamp(0, w - 1) - x[:, None] + 1)[:, None, :].expand(n, 3, 3)
    blur = blur.gather(1, ri).gather(2, ci)

    peak = blur.amax(dim=(1, 2))
    logp = torch.log((blur / peak[:, None, None]).clamp(*_LOG_CLIP))
    c = logp[:, 1, 1]
    dx = 0.5 * (logp[:, 1, 2] - logp[:, 1, 0])
    dy = 0.5 * (logp[:, 2, 1] - logp[:, 0, 1])
    dxx = logp[:, 1, 2] - 2 * c + logp[:, 1, 0] + _EPS
    dyy = logp[:, 2, 1] - 2 * c + logp[:, 0, 1] + _EPS
    dxy = 0.25 * (logp[:, 2, 2] - logp[:, 2, 0] - logp[:, 0, 2] + logp[:, 0, 0])
    det = dxx * dyy - dxy * dxy
    step = torch.stack([(dyy * dx - dxy * dy) / det, (dxx * dy - dxy * dx) / det], dim=-1)

    size = step.abs().amax(dim=-1)  # NaN propagates -> comparisons False
    concave = (dxx < 0) & (det > 0)
    ok = ((size <= 1) | (concave & (size <= max_step))) & (scores > 0) & (peak > 0)
    coords = torch.stack([x, y], dim=-1).float()
    coords = coords - torch.where(ok[:, None], step, torch.zeros((), device=device))
    return coords.reshape(*lead, 2), scores.reshape(lead)


def flip_heatmaps(heatmaps: Tensor, flip_indices) -> Tensor:
    """Mirror heatmaps (..., K, H, W) horizontally and swap left/right channels.

    ``flip_indices[k]`` is the index of k's mirror partner (k itself for centre
    keypoints); output channel k is the flipped input channel ``flip_indices[k]``.
    With UDP no shift is needed: an image flip maps input x -> (W_in-1)-x, which the
    UDP scale maps to heatmap x -> (W_hm-1)-x, exactly what reversing the last
    dimension does to pixel centres.
    """
    if heatmaps.dim() < 3:
        raise ValueError(f"heatmaps must have shape (..., K, H, W), got {tuple(heatmaps.shape)}")
    idx = torch.as_tensor(flip_indices, dtype=torch.long)
    k = heatmaps.shape[-3]
    if idx.shape != (k,):
        raise ValueError(f"flip_indices must have shape ({k},), got {tuple(idx.shape)}")
    # Validate host-side indices only (checking device tensors would force a sync).
    if idx.device.type == "cpu" and not torch.equal(idx.sort().values, torch.arange(k)):
        raise ValueError(f"flip_indices must be a permutation of range({k}), got {idx.tolist()}")
    return heatmaps.index_select(-3, idx.to(heatmaps.device)).flip(-1)


def heatmap_probabilities(logits: Tensor) -> Tensor:
    """Logits (..., K, H, W) of a heatmap cross-entropy head -> each map's softmax over its pixels (float32):
    the distribution the loss trains, so that averages (flip test) and masses (scores) are probabilities."""
    if logits.dim() < 3:
        raise ValueError(f"logits must have shape (..., K, H, W), got {tuple(logits.shape)}")
    return torch.softmax(logits.float().flatten(-2), dim=-1).reshape(logits.shape)


def window_mass(probs: Tensor, coords: Tensor, radius: int) -> Tensor:
    """Probability mass of maps (..., K, H, W) in the (2r+1) x (2r+1) pixel window centred on the pixel nearest
    each ``coords`` (..., K, 2) xy heatmap px; pixels outside the map count 0. In [0, 1] for distributions."""
    if radius < 0:
        raise ValueError(f"radius must be >= 0, got {radius}")
    *lead, h, w = probs.shape
    if tuple(coords.shape) != (*lead, 2):
        raise ValueError(f"coords must have shape {(*lead, 2)}, got {tuple(coords.shape)}")
    maps = probs.float().reshape(-1, h, w)
    # Integral image with a zero first row/column: a window's sum is four look-ups.
    integral = torch.nn.functional.pad(maps.cumsum(1).cumsum(2), (1, 0, 1, 0))
    centre = (coords.reshape(-1, 2) + 0.5).floor().long()  # ties to the larger index
    x0, x1 = (centre[:, 0] - radius).clamp(0, w), (centre[:, 0] + radius + 1).clamp(0, w)
    y0, y1 = (centre[:, 1] - radius).clamp(0, h), (centre[:, 1] + radius + 1).clamp(0, h)
    n = torch.arange(maps.shape[0], device=maps.device)
    mass = integral[n, y1, x1] - integral[n, y0, x1] - integral[n, y1, x0] + integral[n, y0, x0]
    return mass.clamp(0.0, 1.0).reshape(lead)


def keypoint_scores(maps: Tensor, probabilities: bool, radius: int) -> Tensor:
    """The keypoint score of each map (..., K, H, W), in [0, 1]: the one definition that predict, the Python API, the
    app, validation and the ONNX example (docs/deploy.md) share. Both kinds are read at the map's most probable pixel
    (its argmax, the first in row-major order), so a runtime gets the same number without the DARK refinement:

    - ``probabilities`` (a heatmap cross-entropy head, after the softmax): the probability mass within ``radius`` px
      (x and y) of that pixel, the chance the keypoint lies there;
    - heatmaps (an MSE head): the peak value, clipped to [0, 1]. The training target of a labelled keypoint peaks at
      1 and an unlabelled one is 0, so 1 is a keypoint the model is as sure of as its targets; a map above 1 (a head
      not yet trained to the targets' scale, e.g. one pretrained with another loss) says no more than 1.
    """
    *lead, h, w = maps.shape
    flat = maps.float().reshape(-1, h * w)
    index = flat.argmax(dim=1)
    if not probabilities:
        return flat.gather(1, index[:, None])[:, 0].clamp(0.0, 1.0).reshape(lead)
    peaks = torch.stack([index % w, torch.div(index, w, rounding_mode="floor")], dim=-1).float()
    return window_mass(maps, peaks.reshape(*lead, 2), radius)
