"""Matting loss: alpha L1, composition, foreground L1, Sobel-gradient L1, optional Laplacian pyramid."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from sapiens2_ft.tasks.dense_maps import as_mask, masked_mean

DEFAULT_WEIGHTS = {"alpha": 1.0, "composition": 1.0, "foreground": 1.0, "gradient": 1.0, "laplacian": 0.0}
_SOBEL_X = torch.tensor([[-1.0, 0.0, 1.0], [-2.0, 0.0, 2.0], [-1.0, 0.0, 1.0]]) / 8.0
_GAUSS_1D = torch.tensor([1.0, 4.0, 6.0, 4.0, 1.0]) / 16.0


def sobel(x: torch.Tensor) -> torch.Tensor:
    """Sobel x/y gradients of a (B, 1, H, W) map -> (B, 2, H, W) (replicate padding, kernels scaled by 1/8)."""
    kernel = torch.stack([_SOBEL_X, _SOBEL_X.t()]).unsqueeze(1).to(x)
    return F.conv2d(F.pad(x, (1, 1, 1, 1), mode="replicate"), kernel)


def _blur(x: torch.Tensor) -> torch.Tensor:
    """5x5 binomial blur of (B, 1, H, W) with replicate padding."""
    kernel = (_GAUSS_1D[:, None] * _GAUSS_1D[None, :]).view(1, 1, 5, 5).to(x)
    return F.conv2d(F.pad(x, (2, 2, 2, 2), mode="replicate"), kernel)


def laplacian_pyramid(x: torch.Tensor, levels: int = 5) -> list[torch.Tensor]:
    """Band-pass levels of (B, 1, H, W), finest first, ending with the low-pass residual."""
    bands = []
    for _ in range(levels - 1):
        if min(x.shape[-2:]) < 2:
            break
        down = _blur(x)[..., ::2, ::2]
        up = F.interpolate(down, size=x.shape[-2:], mode="bilinear", align_corners=False)
        bands.append(x - _blur(up))
        x = down
    return bands + [x]


def laplacian_loss(alpha: torch.Tensor, alpha_gt: torch.Tensor, levels: int = 5) -> torch.Tensor:
    """Sum over pyramid levels i of 2^i * mean L1 between the Laplacian pyramids."""
    pairs = zip(laplacian_pyramid(alpha, levels), laplacian_pyramid(alpha_gt, levels))
    return sum((2.0**i) * (a - b).abs().mean() for i, (a, b) in enumerate(pairs))


def estimate_background(image: torch.Tensor, alpha: torch.Tensor, fg: torch.Tensor, opaque: float = 0.99):
    """Background B from I = a F + (1 - a) B: (I - a F) / (1 - a) where a < ``opaque``, else I; in [0, 1].

    Where the subject is opaque B is unseen; I there makes the composition term independent of B.
    """
    alpha = alpha.float()
    solved = (image - alpha * fg) / (1.0 - alpha).clamp_min(1.0 - opaque)
    return torch.where(alpha < opaque, solved, image).clamp(0.0, 1.0)


def matting_loss(
    alpha: torch.Tensor,
    fg: torch.Tensor,
    alpha_gt: torch.Tensor,
    fg_gt: torch.Tensor,
    image: torch.Tensor,
    bg: torch.Tensor | None = None,
    unknown_mask: torch.Tensor | None = None,
    weights: dict[str, float] | None = None,
    has_foreground: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """alpha/alpha_gt (B, 1, H, W) in [0, 1]; fg/fg_gt/image/bg (B, 3, H, W); unknown_mask (B, [1,] H, W) bool.

    Terms (means over the pixels of ``unknown_mask``, all pixels when None):
    ``alpha`` |a - a_gt|; ``composition`` |a F + (1 - a) B - I| with the predicted a and F (only
    when ``bg`` is given); ``foreground`` |F - F_gt| where a_gt > 0; ``gradient`` L1 of Sobel
    gradients of a vs a_gt (pixels at the region's edge see their outside neighbours); ``laplacian``
    pyramid L1 of the masked alphas (only when its weight > 0; default 0).
    ``has_foreground`` (B,) bool: samples whose ``fg_gt`` (and so ``bg``) is known; the others are
    left out of the composition and foreground terms (default: all known).
    ``weights`` overrides ``DEFAULT_WEIGHTS``. Returns the unweighted terms plus ``loss``.
    """
    if alpha.ndim != 4 or alpha.shape[1] != 1 or alpha.shape != alpha_gt.shape:
        raise ValueError(
            f"matting_loss: expected alpha and alpha_gt (B, 1, H, W), "
            f"got {tuple(alpha.shape)} and {tuple(alpha_gt.shape)}"
        )
    rgb = (alpha.shape[0], 3, *alpha.shape[2:])
    for name, t in (("fg", fg), ("fg_gt", fg_gt), ("image", image), ("bg", bg)):
        if t is not None and tuple(t.shape) != rgb:
            raise ValueError(f"matting_loss: {name} must be {rgb}, got {tuple(t.shape)}")
    unknown = set(weights or {}) - set(DEFAULT_WEIGHTS)
    if unknown:
        raise ValueError(f"matting_loss: unknown weight names {sorted(unknown)}; known: {sorted(DEFAULT_WEIGHTS)}")
    w = {**DEFAULT_WEIGHTS, **(weights or {})}
    alpha, alpha_gt, fg, fg_gt, image = (t.float() for t in (alpha, alpha_gt, fg, fg_gt, image))
    m = as_mask(unknown_mask, alpha)
    known = m if has_foreground is None else m * has_foreground.to(m).view(-1, 1, 1, 1)
    terms = {"alpha": masked_mean((alpha - alpha_gt).abs(), m)}
    if bg is not None:
        composite = alpha * fg + (1.0 - alpha) * bg.float()
        terms["composition"] = masked_mean((composite - image).abs(), known)
    terms["foreground"] = masked_mean((fg - fg_gt).abs(), known * (alpha_gt > 0).to(m.dtype))
    terms["gradient"] = masked_mean((sobel(alpha) - sobel(alpha_gt)).abs(), m)
    if w["laplacian"] > 0:
        region = m > 0
        terms["laplacian"] = laplacian_loss(torch.where(region, alpha, 0.0), torch.where(region, alpha_gt, 0.0))
    terms["loss"] = sum(w[name] * value for name, value in terms.items())
    return terms
