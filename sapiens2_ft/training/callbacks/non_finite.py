"""A guard against non-finite losses and gradients: skip the optimiser step, or stop, by config."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import lightning as L
import torch
from lightning.pytorch.utilities import rank_zero_warn

from datamodules.errors import Sapiens2FTError


@dataclass
class NonFiniteConfig:
    """What a non-finite (NaN or inf) loss or gradient does to a training step.

    Args:
        policy: ``skip``: that optimiser step changes nothing (its gradients are dropped, so weights and
            optimiser moments stay as they were); it is counted, logged as ``train/non_finite_skips`` and
            reported with the step and the batch's sample ids. ``stop``: the run stops with that report.
        max_consecutive: With ``skip``, stop when more steps than this in a row were non-finite.
    """

    policy: Literal["skip", "stop"] = "skip"
    max_consecutive: int = 5


class NonFiniteError(Sapiens2FTError, RuntimeError):
    """Training produced non-finite values and the policy says stop."""


def sample_ids(batch: dict) -> list:
    """The ids a user can look up in their data: dense file names, else COCO image ids, else indices."""
    for key in ("name", "image_id", "index"):
        if key in batch:
            value = batch[key]
            return value.tolist() if isinstance(value, torch.Tensor) else list(value)
    return []


def _all_finite(tensors: list[torch.Tensor]) -> torch.Tensor:
    """A 0-d bool tensor: no element of ``tensors`` is NaN or inf. Per tensor: for a few values (the losses)."""
    local = [t.to_local() if hasattr(t, "to_local") else t for t in tensors]  # FSDP2 shards: this rank's part
    if not local:
        return torch.tensor(True)
    return torch.stack([t.isfinite().all() for t in local]).all()


def grads_finite(grads: list[torch.Tensor]) -> torch.Tensor:
    """:func:`_all_finite` for many tensors: one fused check per device and dtype, with the kernel GradScaler
    uses to unscale and check gradients (here with a scale of 1, which leaves every value as it is). For the mini
    model's 129 gradients x8.4 faster than per-tensor checks on this CPU (``python bench/finite_check.py``); on
    GPUs a few kernel launches per group instead of two per tensor. Where the kernel is missing: max |g| per
    tensor."""
    groups: dict[tuple, list[torch.Tensor]] = {}
    for g in grads:
        g = g.to_local() if hasattr(g, "to_local") else g
        if g.numel():
            groups.setdefault((g.device, g.dtype), []).append(g)
    checks = []
    for (device, _), group in groups.items():
        found = torch.zeros(1, device=device)
        try:
            torch._amp_foreach_non_finite_check_and_unscale_(group, found, torch.ones(1, device=device))
            checks.append(found[0] == 0)
        except (NotImplementedError, RuntimeError):  # a device or dtype the kernel does not cover
            checks.append(torch.stack([g.abs().amax() for g in group]).isfinite().all())
    return torch.stack([c.to(checks[0].device) for c in checks]).all() if checks else torch.tensor(True)


def _culprit_ids(trainer: L.Trainer, loss_ok: bool, ids: list) -> list:
    """The sample ids to report, from every rank (all take part: they agreed the step is non-finite): those
    of the ranks whose own loss was non-finite, else (gradients are shared) those of all ranks."""
    if trainer.world_size == 1 or not torch.distributed.is_initialized():
        return ids
    gathered: list = [None] * trainer.world_size
    torch.distributed.all_gather_object(gathered, (loss_ok, ids))
    culprits = [rank_ids for ok, rank_ids in gathered if not ok] or [rank_ids for _, rank_ids in gathered]
    return [i for rank_ids in culprits for i in rank_ids]


class NonFiniteGuard(L.Callback):
    """Checks the loss and every gradient before each optimiser step (one device sync), agreed by all ranks."""

    def __init__(self, config: NonFiniteConfig = NonFiniteConfig()):
        self.config = config
        self.skipped = 0
        self.consecutive = 0
        self.events: list[dict] = []  # the first skipped steps: step, what, sample ids
        self._losses: list[torch.Tensor] = []
        self._ids: list = []

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        self._ids += sample_ids(batch)  # gradient accumulation: every micro-batch of the step

    def on_before_backward(self, trainer, pl_module, loss: torch.Tensor) -> None:
        self._losses.append(loss.detach())

    def on_before_optimizer_step(self, trainer, pl_module, optimizer) -> None:
        loss_ok = _all_finite(self._losses)
        scaler = getattr(trainer.precision_plugin, "scaler", None)
        if scaler is not None:
            grads_ok = torch.tensor(True)  # fp16 GradScaler: overflowing gradients are its to skip and rescale
        else:
            grads_ok = grads_finite([p.grad for g in optimizer.param_groups for p in g["params"] if p.grad is not None])
        bad = not bool(loss_ok & grads_ok.to(loss_ok.device))
        bad = trainer.strategy.reduce_boolean_decision(bad, all=False)  # any rank: every rank skips
        losses, ids = self._losses, self._ids
        self._losses, self._ids = [], []
        if not bad:
            self.consecutive = 0
            return
        self.skipped += 1
        self.consecutive += 1
        what = "loss" if not bool(loss_ok) else "gradients" if not bool(grads_ok) else "values on another rank"
        ids = _culprit_ids(trainer, bool(loss_ok), ids)
        scale = scaler.get_scale() if scaler is not None else 1.0  # the hook sees the scaled fp16 loss
        loss_text = ", ".join(f"{v.item() / scale:.4g}" for v in losses[-4:])
        report = (f"step {trainer.global_step}: non-finite {what} (loss {loss_text}); samples of the batch: "
                  f"{ids[:16]}{' ...' if len(ids) > 16 else ''}")
        if len(self.events) < 20:
            self.events.append({"step": trainer.global_step, "non_finite": what, "samples": ids[:64]})
        if self.config.policy == "stop":
            raise NonFiniteError(f"{report}. The run stops (non_finite.policy: stop; 'skip' drops such steps).")
        if self.consecutive > self.config.max_consecutive:
            raise NonFiniteError(f"{report}. {self.consecutive} non-finite steps in a row (non_finite.max_consecutive:"
                                 f" {self.config.max_consecutive}): the run diverged; lower the learning rate or "
                                 f"check these samples with python -m sapiens2_ft.check_data.")
        rank_zero_warn(f"{report}; step skipped ({self.consecutive} in a row, {self.skipped} in all)")
        for group in optimizer.param_groups:  # AdamW leaves parameters without gradients untouched
            for p in group["params"]:
                p.grad = None
        pl_module.log("train/non_finite_skips", float(self.skipped), batch_size=1)

    def state_dict(self) -> dict:
        return {"skipped": self.skipped, "events": self.events}

    def load_state_dict(self, state: dict) -> None:
        self.skipped = state.get("skipped", 0)
        self.events = list(state.get("events", []))
