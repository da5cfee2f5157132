"""What the dense tasks' losses, metrics and modules share about per-pixel maps: valid-pixel masks, masked means,
finite differences, vector lengths and angles of vector maps, resizing outputs to the target size, and mapping the
outputs of a warped input back to the image's pixels."""

from __future__ import annotations

from typing import Sequence

import torch
import torch.nn.functional as F
from torch import Tensor


def as_mask(mask: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    """Valid-pixel mask as float (B, 1, H, W); ``None`` means all pixels are valid."""
    b, _, h, w = like.shape
    if mask is None:
        return like.new_ones(b, 1, h, w)
    if mask.ndim == 3:
        mask = mask.unsqueeze(1)
    if mask.shape != (b, 1, h, w):
        raise ValueError(f"mask must be (B, 1, H, W) or (B, H, W) matching {(b, h, w)}, got {tuple(mask.shape)}")
    return mask.to(like.dtype)


def masked_mean(value: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean of ``value`` (B, C, H, W) over channels and the pixels where ``mask`` (B, 1, H, W) is set; 0 if none."""
    count = mask.sum() * value.shape[1]
    return torch.where(mask > 0, value, 0.0).sum() / count.clamp_min(1.0)


def finite_differences(x: torch.Tensor, mask: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """x- and y- forward differences of x (B, C, H, W), each with the mask of pairs whose two pixels are valid."""
    dx = x[..., :, 1:] - x[..., :, :-1]
    dy = x[..., 1:, :] - x[..., :-1, :]
    return [(dx, mask[..., :, 1:] * mask[..., :, :-1]), (dy, mask[..., 1:, :] * mask[..., :-1, :])]


def vector_length(x: Tensor, dim: int = 1, eps: float = 0.0) -> Tensor:
    """max(|x|, eps) of the vectors along ``dim`` (kept as size 1), as the root of the sum of squares.

    The sum is clamped before the root, so with ``eps > 0`` a zero vector has gradient 0 (not NaN). Not
    ``torch.linalg.vector_norm``: on the CPU its kernel takes ~50x longer over a 3-long channel dim of
    (B, 3, H, W) (torch 2.13; ``python bench/vector_length.py``): F.normalize was a fifth of a normal-demo step.
    """
    return x.square().sum(dim, keepdim=True).clamp_min(eps * eps).sqrt()


def unit_vectors(x: Tensor, dim: int = 1, eps: float = 1e-12) -> Tensor:
    """``F.normalize(x, dim=dim, eps=eps)``: x / max(|x|, eps) along ``dim``, by ``vector_length``."""
    return x / vector_length(x, dim, eps)


def angular_error_deg(pred: Tensor, target: Tensor) -> Tensor:
    """Angle in degrees between the vectors of pred and target (B, 3, H, W) -> (B, H, W); float64."""
    p = unit_vectors(pred.double(), dim=1, eps=1e-12)
    t = unit_vectors(target.double(), dim=1, eps=1e-12)
    return torch.rad2deg(torch.acos((p * t).sum(1).clamp(-1.0, 1.0)))


def flatten_mask(mask: Tensor | None, like: Tensor) -> Tensor:
    """Bool (B, H, W) mask from (B, 1, H, W)/(B, H, W)/None for a (B, C, H, W) tensor."""
    b, _, h, w = like.shape
    if mask is None:
        return torch.ones(b, h, w, dtype=torch.bool, device=like.device)
    if mask.ndim == 4 and mask.shape[1] == 1:
        mask = mask[:, 0]
    if mask.shape != (b, h, w):
        raise ValueError(f"mask must be (B, 1, H, W) or (B, H, W) matching {(b, h, w)}, got {tuple(mask.shape)}")
    return mask.bool()


def resize_to(x: torch.Tensor, size: Sequence[int] | None) -> torch.Tensor:
    """Bilinear resize of (B, C, h, w) to ``size`` (H, W) when it differs (tiny heads predict at 1/4)."""
    if size is None or tuple(x.shape[-2:]) == tuple(size):
        return x
    return F.interpolate(x, size=tuple(size), mode="bilinear", align_corners=False)


def unwarp(maps: torch.Tensor, matrix, input_size: Sequence[int], image_size: Sequence[int],
           mode: str = "bilinear") -> torch.Tensor:
    """Maps (B, C, h, w) predicted for a warped input (``matrix``: 2x3, image px -> input px) -> image pixels.

    Works at any map resolution: positions are normalised by the input size (pixel centres).
    """
    height, width = image_size
    ys, xs = torch.meshgrid(torch.arange(height, dtype=torch.float64), torch.arange(width, dtype=torch.float64),
                            indexing="ij")
    m = torch.as_tensor(matrix, dtype=torch.float64)
    px = m[0, 0] * xs + m[0, 1] * ys + m[0, 2]
    py = m[1, 0] * xs + m[1, 1] * ys + m[1, 2]
    grid = torch.stack([(px + 0.5) / input_size[1] * 2 - 1, (py + 0.5) / input_size[0] * 2 - 1], dim=-1)
    grid = grid[None].expand(len(maps), -1, -1, -1).to(maps.device, torch.float32)
    return F.grid_sample(maps.float(), grid, mode=mode, padding_mode="border", align_corners=False)
