"""The measured side of the memory estimator: peak resident memory of a few training steps of one model, in a
process of its own (tests/forked.py).

``python tests/memory_probe.py --out FILE --size S --input H W --batch B [--lora R] [--frozen_dtype D]
[--bf16] [--checkpointing N] [--task T --labels N] [--head JSON]`` writes ``{"params": bytes, "peak": bytes}`` to FILE: the memory the built model
added, and the peak over its steps (model, gradients, AdamW state, activations) above the process's memory
before the model was built. A first step of the ``tiny`` model with the same options runs before that
measurement and is freed: the lazy imports and the CPU kernels' first-use set-up (oneDNN's JIT code, tens of MiB that
differ between CPUs) belong to the process, not to the model the estimator counts. glibc is told to map every allocation over 64 KiB on its own, so freed tensors
leave the resident set at once (no heap reuse hides or inflates the peak).
"""

from __future__ import annotations

import argparse
import ctypes
import gc
import json
import os
from pathlib import Path

import torch

M_MMAP_THRESHOLD = -3  # glibc mallopt: a fixed threshold also turns off the dynamic one
PAGE = os.sysconf("SC_PAGE_SIZE")


def resident() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def peak_resident() -> int:
    with open("/proc/self/status") as f:
        line = next(line for line in f if line.startswith("VmHWM:"))
    return int(line.split()[1]) * 1024


def reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")  # the peak resident set restarts from the current one


def main(argv: list[str] | None = None) -> None:
    from sapiens2_ft.models.adapters import LoraOptions, adapt
    from sapiens2_ft.models.sharding import apply_activation_checkpointing
    from sapiens2_ft.tasks.registry import build_task_model

    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--task", default="pose")
    parser.add_argument("--labels", type=int, default=17)
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--input", type=int, nargs=2, default=[256, 192])
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--lora", type=int, default=0)
    parser.add_argument("--frozen_dtype", default="float32")
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--checkpointing", type=int, default=0)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--head", type=json.loads, default=None, help="model.head, as JSON")
    args = parser.parse_args(argv)
    ctypes.CDLL("libc.so.6").mallopt(M_MMAP_THRESHOLD, 64 * 1024)
    torch.set_num_threads(1)
    x = torch.randn(args.batch, 3, *args.input)
    labels = [f"label_{i}" for i in range(args.labels)]
    dtype = None if args.frozen_dtype == "float32" else getattr(torch, args.frozen_dtype)

    def build(size: str) -> tuple[torch.nn.Module, torch.optim.Optimizer]:
        torch.manual_seed(0)
        with torch.device("meta"):  # built and adapted without memory, then allocated once, in its final dtypes
            model, _ = build_task_model(args.task, labels, tuple(args.input), size=size, head=args.head)
            adapt(model, lora=LoraOptions(rank=args.lora, alpha=2.0 * max(args.lora, 1)), frozen_dtype=dtype)
        model.to_empty(device="cpu")
        with torch.no_grad():  # the values do not change the memory; random ones are quicker than the model's init
            for tensor in (*model.parameters(), *model.buffers()):
                tensor.normal_(0.0, 0.02) if tensor.is_floating_point() else tensor.zero_()
        apply_activation_checkpointing(model, args.checkpointing)
        model.train()
        return model, torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-4)

    def train(model: torch.nn.Module, optimizer: torch.optim.Optimizer, steps: int) -> None:
        for _ in range(steps):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.bf16):
                loss = model(x)[0].float().square().mean()  # the first output (heatmaps, logits, ...)
            loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            del loss

    train(*build("tiny"), steps=1)  # the process's own set-up, outside the measurement (module docstring)
    gc.collect()
    before = resident()
    model, optimizer = build(args.size)
    gc.collect()
    params = resident() - before
    reset_peak()
    train(model, optimizer, args.steps)
    peak = peak_resident() - before
    args.out.write_text(json.dumps({"params": params, "peak": peak}))


if __name__ == "__main__":
    main()
