"""AdamW with layer-wise learning-rate decay and a warm-up + linear-decay schedule (upstream recipe)."""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class OptimConfig:
    """Optimiser and schedule.

    Args:
        lr: Peak learning rate (upstream: 5e-4; 1e-4 for 5B pose/normal/pointmap).
        weight_decay: AdamW decay; never applied to 1-D params, biases or position embeddings (upstream's
            rule: the cls, register and mask tokens are decayed).
        betas: AdamW betas.
        layer_decay: Layer-wise lr decay: head and final norm x1, block i x rate^(L-i),
            embeddings x rate^(L+1). 1.0 disables it (upstream: 0.8/0.85/0.9/0.94 for 0.4b/0.8b/1b/5b).
        warmup_steps: Linear warm-up length in optimiser steps; the lr then decays linearly to 0
            at the end of training.
        warmup_start_factor: Warm-up starts at this fraction of the lr.
        fused: Use the fused AdamW kernel when on GPU.
    """

    lr: float = 5e-4
    weight_decay: float = 0.1
    betas: tuple[float, float] = (0.9, 0.999)
    layer_decay: float = 1.0
    warmup_steps: int = 500
    warmup_start_factor: float = 1e-3
    fused: bool = True


_NO_DECAY = re.compile(r"(^|\.)bias$|pos_embed")
_BLOCK = re.compile(r"\.layer\.(\d+)\.")


def layer_depth(name: str, num_layers: int) -> int:
    """0 for embeddings, i+1 for transformer block i, L+1 for the final norm and the head."""
    if ".embeddings." in f".{name}":
        return 0
    match = _BLOCK.search(name)
    return int(match.group(1)) + 1 if match else num_layers + 1


def param_groups(model: nn.Module, cfg: OptimConfig, num_layers: int) -> list[dict]:
    """Parameter groups keyed by (depth, decay); each carries an ``lr_scale`` and a readable ``name``."""
    groups: dict[tuple[int, bool], dict] = {}
    for name, param in model.named_parameters():
        if not param.requires_grad:
            continue
        depth = layer_depth(name, num_layers)
        decay = param.ndim > 1 and not _NO_DECAY.search(name)
        key = (depth, decay)
        if key not in groups:
            scale = cfg.layer_decay ** (num_layers + 1 - depth)
            label = "embed" if depth == 0 else ("head" if depth == num_layers + 1 else f"layer{depth - 1}")
            groups[key] = dict(params=[], lr=cfg.lr * scale, lr_scale=scale,
                               weight_decay=cfg.weight_decay if decay else 0.0,
                               name=f"{label}{'' if decay else '_no_decay'}")
        groups[key]["params"].append(param)
    return [groups[k] for k in sorted(groups)]


def warmup_linear_decay(step: int, warmup_steps: int, total_steps: int, start_factor: float) -> float:
    """lr multiplier: linear from ``start_factor`` to 1 over ``warmup_steps``, then linear to 0 at ``total_steps``."""
    if step < warmup_steps:
        return start_factor + (1.0 - start_factor) * step / max(1, warmup_steps)
    return max(0.0, (total_steps - step) / max(1, total_steps - warmup_steps))


def build_optimizer(model: nn.Module, cfg: OptimConfig, num_layers: int, total_steps: int):
    """AdamW over :func:`param_groups` plus a per-step LambdaLR; returns Lightning's optimizer dict."""
    groups = param_groups(model, cfg, num_layers)
    on_gpu = next(model.parameters()).is_cuda
    fused = True if cfg.fused and on_gpu else None
    optimizer = torch.optim.AdamW(groups, lr=cfg.lr, betas=tuple(cfg.betas), fused=fused)
    warmup = min(cfg.warmup_steps, max(0, total_steps - 1))
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: warmup_linear_decay(step, warmup, total_steps, cfg.warmup_start_factor)
    )
    return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "step"}}
