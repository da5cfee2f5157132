"""Inference speed of the three backends side by side: torch eager fp32, torch under bf16 autocast, and
onnxruntime on the exported ONNX graph (fp32), for a pose model (people/s: person crops, flip test off, the
network only) and a seg model (images/s), with the ONNX export time and each backend's first-call latency.

The models are the ``--size`` preset (default ``mini``, the demo backbone's shape; random weights, no download)
at ``--input``. Backends are timed in alternation over ``--rounds`` rounds (load changes hit all of them); the
ratios are of medians taken in this one run. bf16 autocast is slow on CPUs without native bf16 (check
``lscpu`` for avx512_bf16 / amx): it is reported anyway.

Run: ``python bench/onnx_speed.py [--size mini] [--input 256 192] [--batch 8] [--rounds 5] [--threads N]``
(a few minutes on 2 cores; pause background jobs first).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.timing import seconds  # noqa: E402
from sapiens2_ft.models.onnx import OnnxModel, export_onnx  # noqa: E402
from sapiens2_ft.tasks.registry import TASKS, build_task_model, label_names  # noqa: E402


def backends(model, size, directory: Path) -> tuple[dict, dict]:
    """name -> callable(pixel_values), and the setup times (export, first calls)."""
    started = time.perf_counter()
    export_onnx(model, size, directory / "model.onnx")
    setup = {"export_s": time.perf_counter() - started}
    runtime = OnnxModel(directory / "model.onnx", model.config)

    def eager(x):
        with torch.no_grad():
            return model(pixel_values=x)

    def bf16(x):
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            return model(pixel_values=x)

    calls = {"torch fp32": eager, "torch bf16": bf16, "onnxruntime": runtime}
    return calls, setup


def bench(task: str, size, batch: int, rounds: int, preset: str) -> None:
    labels = label_names(task, "coco17" if TASKS[task].model.label_arg == "keypoints" else None)
    model, _ = build_task_model(task, labels, size, size=preset)
    model.eval()
    x = torch.randn(batch, 3, *size)
    with tempfile.TemporaryDirectory() as tmp:
        calls, setup = backends(model, size, Path(tmp))
        first = {name: seconds(lambda f=f: f(x[:1])) for name, f in calls.items()}
        times = {name: [] for name in calls}
        for _ in range(rounds):
            for name, f in calls.items():
                times[name].append(seconds(lambda f=f: f(x)))
    unit = "people/s" if TASKS[task].predictor == "crops" else "images/s"
    base = statistics.median(times["torch fp32"])
    print(f"\n{task} ({preset}, {size[0]}x{size[1]}, batch {batch}): ONNX export {setup['export_s']:.1f} s")
    print(f"{'backend':<14}{unit:>10}{'x fp32':>9}{'first call':>12}")
    for name, values in times.items():
        median = statistics.median(values)
        print(f"{name:<14}{batch / median:>10.1f}{base / median:>9.2f}{first[name] * 1000:>10.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="mini", help="backbone preset")
    parser.add_argument("--input", type=int, nargs=2, default=(256, 192))
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    parser.add_argument("--tasks", nargs="+", default=["pose", "seg"])
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    for task in args.tasks:
        bench(task, tuple(args.input), args.batch, args.rounds, args.size)


if __name__ == "__main__":
    main()
