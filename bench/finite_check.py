"""The non-finite guard's gradient check on the CPU: ``non_finite.grads_finite`` (GradScaler's fused
check-and-unscale kernel with a scale of 1, per device and dtype) against one ``isfinite().all()`` per tensor,
over the gradients of a task model built from a size preset.

The guard runs the check before every optimiser step. The two sides are timed in alternation (``--rounds``
pairs); reported: median times and the median of the per-pair ratios.

Run: ``python bench/finite_check.py [--size mini] [--rounds 20]`` (a few seconds).
"""

from __future__ import annotations

import argparse

import torch
from timing import paired

from sapiens2_ft.tasks.registry import build_task_model, task_spec
from sapiens2_ft.training.callbacks.non_finite import grads_finite


def per_tensor(grads: list[torch.Tensor]) -> torch.Tensor:
    return torch.stack([g.isfinite().all() for g in grads]).all()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="mini", help="a size preset: tiny, mini (the demos' backbone), 0.4b, ...")
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    model, _ = build_task_model("normal", list(task_spec("normal").model.outputs), (256, 192), size=args.size)
    grads = [torch.randn_like(p) for p in model.parameters()]
    print(f"{args.size}: {len(grads)} gradients, {sum(g.numel() for g in grads) / 1e6:.2f} M values, "
          f"{torch.get_num_threads()} threads, torch {torch.__version__}")
    assert bool(grads_finite(grads)) and bool(per_tensor(grads))
    a, b, ratio = paired(lambda: grads_finite(grads), lambda: per_tensor(grads), args.rounds)
    print(f"fused {a * 1e3:.2f} ms   per tensor {b * 1e3:.2f} ms   per tensor / fused x{ratio:.1f}")


if __name__ == "__main__":
    main()
