"""Training step time with the transformer blocks compiled (``model.scale.compile``) against eager.

One seg model of preset ``--size`` at ``--input`` (random weights), trained on one fixed batch with AdamW, eager
and compiled (``--backend``, default inductor), with activation checkpointing of every block when
``--checkpointing 1``. The first ``--warmup`` steps of each (compilation included) are left out; then the two
alternate one step at a time for ``--steps`` pairs, so that slow changes in machine load hit both. Reported:
the median step of each, their ratio, and the compile time of the first forward passes.

Run: ``python bench/compile_speed.py [--size tiny] [--input 256 192] [--batch 4] [--device cpu]`` (about two
minutes on 2 CPU cores, most of it inductor's compilation); on a GPU: ``--device cuda --size 0.4b --input 1024 768
--batch 8 --bf16`` (bench/gpu_check.sh runs the throughput check with ``--compile`` for images/s and MFU).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sapiens2_ft.models.sharding import ScaleConfig, place_model  # noqa: E402
from sapiens2_ft.tasks.registry import build_task_model, model_class  # noqa: E402


def trainer(args, compile: bool):
    """A step function of its own model and optimiser (same initial weights for both)."""
    torch.manual_seed(0)
    scale = ScaleConfig(activation_checkpointing=args.checkpointing, compile=compile, compile_backend=args.backend)
    model, _ = place_model(lambda: build_task_model("seg", [f"c{i}" for i in range(29)], tuple(args.input),
                                                    size=args.size), model_class("seg"), scale)
    model = model.to(args.device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(args.batch, 3, *args.input, generator=g).to(args.device)
    y = torch.randint(0, 29, (args.batch, *args.input), generator=g).to(args.device)

    def step() -> float:
        start = time.perf_counter()
        with torch.autocast(torch.device(args.device).type, dtype=torch.bfloat16, enabled=args.bf16):
            loss = F.cross_entropy(F.interpolate(model(x).logits.float(), size=tuple(args.input), mode="bilinear"), y)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if args.device.startswith("cuda"):
            torch.cuda.synchronize()
        return time.perf_counter() - start

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--input", type=int, nargs=2, default=[256, 192])
    parser.add_argument("--batch", type=int, default=4)
    parser.add_argument("--checkpointing", type=int, default=0)
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--bf16", action="store_true")
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    eager, compiled = trainer(args, False), trainer(args, True)
    start = time.perf_counter()
    for _ in range(args.warmup):
        eager()
    warm_eager = time.perf_counter() - start
    start = time.perf_counter()
    for _ in range(args.warmup):
        compiled()
    warm_compiled = time.perf_counter() - start
    pairs = [(eager(), compiled()) for _ in range(args.steps)]
    e, c = statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs)
    print(f"seg {args.size} at {args.input[0]}x{args.input[1]}, batch {args.batch}, {args.device}"
          f"{' bf16' if args.bf16 else ''}, checkpointing {args.checkpointing}, backend {args.backend}:")
    print(f"  eager     {1000 * e:8.1f} ms/step")
    print(f"  compiled  {1000 * c:8.1f} ms/step   eager / compiled x{e / c:.2f}")
    print(f"  warm-up ({args.warmup} steps, compilation included): compiled {warm_compiled:.1f} s, "
          f"eager {warm_eager:.1f} s")


if __name__ == "__main__":
    main()
