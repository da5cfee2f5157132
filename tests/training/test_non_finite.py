"""The non-finite guard's decisions that a one-process CPU run cannot reach: an fp16 GradScaler's
overflows, and naming the samples of the rank whose loss was non-finite; its fused gradient check."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from forked import start_ranks

from sapiens2_ft.training.callbacks.non_finite import NonFiniteConfig, NonFiniteGuard, _culprit_ids, grads_finite


def _one_step(scaler) -> NonFiniteGuard:
    """A step with a finite loss and an inf gradient through the guard; returns the guard."""
    weight = torch.nn.Parameter(torch.ones(2))
    weight.grad = torch.tensor([1.0, float("inf")])
    optimizer = torch.optim.AdamW([weight])
    trainer = SimpleNamespace(precision_plugin=SimpleNamespace(scaler=scaler), world_size=1, global_step=7,
                              strategy=SimpleNamespace(reduce_boolean_decision=lambda bad, all: bad))
    module = SimpleNamespace(log=lambda *args, **kwargs: None)
    guard = NonFiniteGuard(NonFiniteConfig())
    guard.on_train_batch_start(trainer, module, {"name": ["a.jpg", "b.jpg"]}, 0)
    guard.on_before_backward(trainer, module, torch.tensor(0.5))
    guard.on_before_optimizer_step(trainer, module, optimizer)
    return guard


def test_gradient_overflow_is_left_to_an_fp16_grad_scaler():
    assert _one_step(scaler=None).skipped == 1  # bf16 / fp32: an inf gradient skips the step
    assert _one_step(scaler=torch.amp.GradScaler("cpu")).skipped == 0  # the scaler skips and rescales itself


def _mixed_grads() -> list[torch.Tensor]:
    """Gradients of several dtypes and sizes, an empty one and extreme finite values among them."""
    g = torch.Generator().manual_seed(0)
    grads = [torch.randn(shape, generator=g).to(dtype) for shape, dtype in
             [((7, 5), torch.float32), ((300,), torch.float32), ((4, 3, 2), torch.bfloat16), ((9,), torch.float16),
              ((0,), torch.float32), ((6,), torch.float64)]]
    grads[0][0, :3] = torch.tensor([torch.finfo(torch.float32).max, 1e-45, -0.0])  # largest, denormal, -0
    return grads


@pytest.mark.parametrize("kernel", ["fused", "fallback"])
def test_the_fused_gradient_check_finds_every_nan_and_inf_and_changes_nothing(kernel, monkeypatch):
    if kernel == "fallback":  # a device or dtype GradScaler's kernel does not cover
        def missing(*args):
            raise NotImplementedError("no kernel")
        monkeypatch.setattr(torch, "_amp_foreach_non_finite_check_and_unscale_", missing)
    grads = _mixed_grads()
    before = [t.clone() for t in grads]
    assert bool(grads_finite(grads)) and bool(grads_finite([]))
    # bit for bit the same values afterwards (the kernel multiplies by the scale, 1 here)
    assert all(a.view(torch.uint8).equal(b.view(torch.uint8)) for a, b in zip(grads, before))
    for i, t in enumerate(grads):
        for bad in (float("nan"), float("inf"), float("-inf")):
            if t.numel() == 0:
                continue
            broken = [u.clone() for u in before]
            broken[i].view(-1)[-1] = bad  # the last element of one tensor
            assert not all(bool(u.isfinite().all()) for u in broken)  # the per-tensor check agrees
            assert not bool(grads_finite(broken)), (i, bad)


def _gather(rank: int, rendezvous: str, results) -> None:
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}", rank=rank, world_size=2)  # no TCP port
    try:
        trainer = SimpleNamespace(world_size=2)
        results[rank] = (_culprit_ids(trainer, rank == 0, [f"rank{rank}.jpg"]),  # rank 1's loss was NaN
                         _culprit_ids(trainer, True, [f"rank{rank}.jpg"]))  # only the (shared) gradients
    finally:
        dist.destroy_process_group()


@pytest.mark.distributed
def test_reported_samples_come_from_the_rank_with_the_non_finite_loss(tmp_path):
    results = mp.Manager().dict()
    start_ranks(_gather, (str(tmp_path / "rendezvous"), results), nprocs=2)
    for rank in (0, 1):
        assert results[rank] == (["rank1.jpg"], ["rank0.jpg", "rank1.jpg"])
