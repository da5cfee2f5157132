"""Where the demo pretraining step's time goes on the CPU: ``torch.profiler`` over a few steps of the recipe's
model (``bench/cpu_mfu.py``'s step: mini backbone, five heads, forward + backward + AdamW), in the recipe's
precision (bf16 autocast with eager attention where the CPU has native bf16, else fp32).

Prints the self CPU time per op kind (matmuls, convolutions, normalisation, activations, softmax, element-wise,
reductions, copies and casts, the optimiser, the rest), the top ops, and the FLOP/s of the matmul and
convolution kernels against the rest: on a CPU where AMX makes matmuls cheap, the rest is the next lever.

Run: ``python bench/step_profile.py [--root data/synthetic-pretrain] [--steps 3] [--precision auto]`` (about a
minute on 2 cores; pause background jobs first).
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cpu_mfu import bf16_eager, build_step  # noqa: E402

from sapiens2_ft.training.cpu_precision import native_bf16  # noqa: E402

# op-name fragments per kind, first match wins (aten names, forward and autograd's backward nodes alike)
KINDS = [
    ("optimiser", ("_foreach", "adam", "lerp", "addcdiv", "addcmul")),
    ("matmul", ("addmm", "mm", "bmm", "matmul", "linear", "baddbmm")),
    ("convolution", ("conv", "mkldnn_convolution", "upsample")),
    ("normalisation", ("layer_norm", "batch_norm", "group_norm", "rms_norm", "native_norm", "instance_norm")),
    ("activation", ("gelu", "silu", "relu", "sigmoid", "tanh", "threshold")),
    ("softmax / log-softmax", ("softmax", "nll_loss", "cross_entropy")),
    ("copy / cast / layout", ("copy_", "to_copy", "_to", "contiguous", "clone", "cat", "stack", "permute", "index",
                              "gather", "scatter", "pad", "grid_sampler", "fill_", "zero_")),
    ("reduction", ("sum", "mean", "norm", "max", "min", "amax", "var", "std")),
    ("element-wise", ("add", "mul", "sub", "div", "pow", "sqrt", "rsqrt", "exp", "log", "abs", "clamp", "neg",
                      "where", "sign", "lt", "gt", "eq", "ne", "maximum", "minimum")),
]


def kind(name: str) -> str:
    lowered = name.lower()
    for label, fragments in KINDS:
        if any(f in lowered for f in fragments):
            return label
    return "other"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--root", type=Path, default=Path("bench/out/mfu-data"))
    parser.add_argument("--precision", choices=["auto", "bf16", "fp32"], default="auto")
    parser.add_argument("--top", type=int, default=25)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    bf16 = native_bf16() if args.precision == "auto" else args.precision == "bf16"
    module, batch, step = build_step(args.batch, args.root)
    context = (lambda: bf16_eager(module)) if bf16 else contextlib.nullcontext
    with context():
        step(), step()  # warm-up: allocations, oneDNN primitives
        with profile(activities=[ProfilerActivity.CPU], with_flops=True) as prof:
            start = time.perf_counter()
            for _ in range(args.steps):
                step()
            wall = (time.perf_counter() - start) / args.steps
    events = [e for e in prof.key_averages() if e.key.startswith("aten::") or "Backward" in e.key]
    # self time of aten ops only: autograd nodes' self time is their bookkeeping, their kernels are aten ops
    aten = [e for e in events if e.key.startswith("aten::")]
    total = sum(e.self_cpu_time_total for e in aten)
    per_kind, flops = defaultdict(float), defaultdict(float)
    for e in aten:
        per_kind[kind(e.key)] += e.self_cpu_time_total
        flops[kind(e.key)] += e.flops or 0
    print(f"precision {'bf16 autocast, eager attention' if bf16 else 'fp32'}; batch {args.batch}, "
          f"{args.threads} threads, {args.steps} steps profiled; aten self time {total / 1e3 / args.steps:.0f} ms "
          f"a step, wall {wall * 1e3:.0f} ms a step (profiled)")
    print(f"\n{'kind':<24} {'ms/step':>8} {'share':>6} {'GFLOP/s':>8}")
    for label, us in sorted(per_kind.items(), key=lambda p: -p[1]):
        rate = f"{flops[label] / us / 1e3:8.1f}" if flops[label] else f"{'':>8}"
        print(f"{label:<24} {us / 1e3 / args.steps:8.1f} {100 * us / total:5.1f}% {rate}")
    print(f"\ntop {args.top} ops by self time:")
    print(f"{'op':<44} {'kind':<22} {'calls':>6} {'ms/step':>8} {'share':>6}")
    for e in sorted(aten, key=lambda e: -e.self_cpu_time_total)[:args.top]:
        print(f"{e.key[:44]:<44} {kind(e.key):<22} {e.count // args.steps:6d} "
              f"{e.self_cpu_time_total / 1e3 / args.steps:8.1f} {100 * e.self_cpu_time_total / total:5.1f}%")


if __name__ == "__main__":
    main()
