"""CPU MFU of the demo backbone's pretraining step: the cores' matmul peak, the step's FLOPs and its time.

1. Peak: a 2048 x 2048 matmul and one at the mini model's MLP shape (batch x tokens, 160) x (160, 640), in
   fp32 and in bf16. bf16 runs natively only on CPUs with ``avx512_bf16`` or AMX (``lscpu``); elsewhere oneDNN
   emulates it and it is far slower than fp32, which this prints.
2. The step: ``MultiTaskModule`` (``configs/pretrain_demo_backbone.yaml``'s model: mini, five heads) on one
   batch of its own data (``--root``: a synthetic dataset there is used as it is, e.g. the pretraining's
   ``data/synthetic-pretrain``; 64 images are rendered there when it holds none), forward + backward + AdamW.
   Its FLOPs are counted once with ``torch.utils.flop_counter.FlopCounterMode`` (per part: backbone on the images, on
   the pose crops, each head), then the step is timed (median of ``--steps``) in each variant:
   ``fp32`` (``--threads`` threads), ``fp32, 1 thread``, and where the CPU has native bf16 (``--bf16 force``
   times them anyway) ``bf16 autocast`` and ``bf16, eager attention`` (the recipe's setting there); then the
   last of these (fp32 without native bf16) again with every transformer block compiled
   (``model.scale.compile: true``: a second module, compiled in a warm-up step whose time is printed;
   ``--no-compile`` leaves it out).
3. MFU = achieved FLOP/s / the matmul peak at the mini shape of the same dtype and thread count.

Run: ``python bench/cpu_mfu.py [--batch 16] [--steps 5] [--threads 2]`` (about 4 minutes on 2 cores; pause
background jobs first: the figures are only comparable on an otherwise idle machine).
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from timing import median_seconds  # noqa: E402

from sapiens2_ft.training.cpu_precision import native_bf16  # noqa: E402

HIDDEN, MLP = 160, 640  # the mini preset


def matmul_gflops(m: int, k: int, n: int, dtype: torch.dtype, repeats: int = 5) -> float:
    a, b = torch.randn(m, k, dtype=dtype), torch.randn(k, n, dtype=dtype)
    if m * k * n * 2 / 1e9 < 1:  # small shapes: many calls per timing, so the clock's resolution does not matter
        calls = max(1, int(1e9 / (2 * m * k * n)))
        return 2 * m * k * n * calls / median_seconds(lambda: [a @ b for _ in range(calls)], repeats) / 1e9
    return 2 * m * k * n / median_seconds(lambda: a @ b, repeats) / 1e9


def build_step(batch_size: int, root: Path, compile: bool = False):
    """(module, batch, step function) of one pretraining step of the demo recipe's model; ``compile``: its
    transformer blocks compiled (``ScaleConfig.compile``)."""
    from datamodules.multitask_datamodule import MultiTaskDataModule
    from datamodules.synthetic.generate import read_parameters
    from datamodules.synthetic_data import SyntheticData, render_if_missing
    from sapiens2_ft.models.sharding import ScaleConfig
    from sapiens2_ft.tasks.multitask.module import MultiTaskModule

    if read_parameters(root) is None:  # a synthetic dataset already there is used as it is, never re-rendered
        render_if_missing(root, SyntheticData(num_images=max(4 * batch_size, 64), seed=7, val_fraction=0.1))
    datamodule = MultiTaskDataModule(root=str(root), batch_size=batch_size, num_workers=0)
    datamodule.setup("fit")
    batch = next(iter(datamodule.train_dataloader()))
    module = MultiTaskModule(size="mini", scale=ScaleConfig(compile=compile))
    module.configure_model()
    module.train()
    optimizer = torch.optim.AdamW(module.parameters(), lr=1e-4)

    def step() -> float:
        losses, _ = module._losses(batch, "train")
        optimizer.zero_grad(set_to_none=True)
        losses["loss"].backward()
        optimizer.step()
        return float(losses["loss"].detach())

    return module, batch, step


def count_flops(module, batch, step) -> tuple[float, dict[str, float]]:
    """FLOPs of one step, and of its parts: the backbone on the images and on the pose crops (forward +
    backward each; the same shapes), the five heads and their losses (the rest). Counted apart because the
    counter's per-module split misplaces backward FLOPs of a shared module."""
    from torch.utils.flop_counter import FlopCounterMode

    from sapiens2_ft.models.preprocessing import normalize_images

    with FlopCounterMode(display=False) as counter:
        step()
    total = counter.get_total_flops()
    with FlopCounterMode(display=False) as counter:
        out = module.backbone_model()(normalize_images(batch["image"]))
        out.last_hidden_state.float().sum().backward()
    module.zero_grad(set_to_none=True)
    backbone = counter.get_total_flops()
    return total, {"backbone, images": backbone, "backbone, pose crops": backbone,
                   "heads and losses": total - 2 * backbone}


@contextlib.contextmanager
def bf16_eager(module):
    """bf16 autocast with the backbone's attention as plain matmuls and softmax (``attn_implementation: eager``,
    the recipe's choice) instead of SDPA's flash kernel."""
    config = module.backbone_model().config
    config._attn_implementation = "eager"
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            yield
    finally:
        config._attn_implementation = "sdpa"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--root", type=Path, default=Path("bench/out/mfu-data"))
    parser.add_argument("--bf16", choices=["auto", "force", "off"], default="auto")
    parser.add_argument("--no-compile", dest="compile", action="store_false", help="skip the compiled variant")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    bf16 = native_bf16() if args.bf16 == "auto" else args.bf16 == "force"
    tokens = args.batch * (256 // 16) * (192 // 16)

    print(f"CPU: native bf16 {'yes' if native_bf16() else 'no'}; torch {torch.__version__}, "
          f"{torch.backends.cpu.get_cpu_capability()}, {args.threads} threads")
    peak = {}
    for dtype in (torch.float32, torch.bfloat16):
        big = matmul_gflops(2048, 2048, 2048, dtype, repeats=3 if dtype == torch.float32 or bf16 else 1)
        peak[dtype] = matmul_gflops(tokens, HIDDEN, MLP, dtype)
        print(f"peak {str(dtype).removeprefix('torch.'):>8}: 2048^3 {big:7.1f} GFLOP/s, "
              f"({tokens}, {HIDDEN}) x ({HIDDEN}, {MLP}) {peak[dtype]:7.1f} GFLOP/s")
    torch.set_num_threads(1)
    peak["fp32, 1 thread"] = matmul_gflops(tokens, HIDDEN, MLP, torch.float32)
    torch.set_num_threads(args.threads)
    print(f"peak  float32 on 1 thread at the mini shape: {peak['fp32, 1 thread']:7.1f} GFLOP/s")

    module, batch, step = build_step(args.batch, args.root)
    step()  # warm-up: allocations, oneDNN primitives
    total, parts = count_flops(module, batch, step)
    print(f"step FLOPs (forward + backward, batch {args.batch}): {total / 1e9:.1f} GFLOP")
    for name, flops in sorted(parts.items(), key=lambda p: -p[1]):
        print(f"  {name:<22} {flops / 1e9:7.1f} GFLOP  {100 * flops / total:5.1f}%")

    variants = {f"fp32, {args.threads} threads": (args.threads, contextlib.nullcontext, torch.float32),
                "fp32, 1 thread": (1, contextlib.nullcontext, torch.float32)}
    if bf16:
        variants["bf16 autocast"] = (args.threads, lambda: torch.autocast("cpu", dtype=torch.bfloat16),
                                     torch.bfloat16)
        variants["bf16, eager attention"] = (args.threads, lambda: bf16_eager(module), torch.bfloat16)
    steps = dict.fromkeys(variants, step)
    if args.compile:  # the best variant again, its blocks compiled: a module of its own, compiled before timing
        base = "bf16, eager attention" if bf16 else f"fp32, {args.threads} threads"
        name, (threads, _, dtype) = f"{base}, compiled", variants[base]
        compiled, _, steps[name] = build_step(args.batch, args.root, compile=True)
        context = (lambda: bf16_eager(compiled)) if dtype == torch.bfloat16 else contextlib.nullcontext
        variants[name] = (threads, context, dtype)
        with context():
            start = time.perf_counter()
            steps[name]()
        print(f"compiled variant: first step (compilation) {time.perf_counter() - start:.1f} s")
    times = defaultdict(list)
    for _ in range(args.steps):  # one step of each variant per round: load changes hit all of them
        for name, (threads, context, _) in variants.items():
            torch.set_num_threads(threads)
            with context():
                start = time.perf_counter()
                steps[name]()
                times[name].append(time.perf_counter() - start)
    torch.set_num_threads(args.threads)
    print(f"\n{'variant':<32} {'step s':>7} {'GFLOP/s':>8} {'MFU':>6}")
    for name, (threads, _, dtype) in variants.items():
        seconds = statistics.median(times[name])
        rate = total / seconds / 1e9
        reference = peak["fp32, 1 thread"] if threads == 1 else peak[dtype]
        print(f"{name:<32} {seconds:7.2f} {rate:8.1f} {100 * rate / reference:5.1f}%")
    if not bf16:
        print(f"bf16 autocast not timed: no native bf16 on this CPU (its matmul runs at "
              f"{peak[torch.bfloat16]:.1f} GFLOP/s against fp32's {peak[torch.float32]:.1f}); --bf16 force times it")


if __name__ == "__main__":
    main()
