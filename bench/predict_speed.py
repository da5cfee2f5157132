"""Pose prediction speed: people/s of ``sapiens2_ft.predict``'s loop with one crop per forward pass against crops
batched across images, and with image decoding in background threads.

A randomly initialised pose model of preset ``--size`` at ``--input`` (no download), on synthetic images rendered
once into ``--data`` (people boxed by their ground truth, so the detector is not timed). The settings run in turn
``--rounds`` times (so slow changes in machine load hit all of them), each a full pass over the images after one
warm-up pass; reported: the median people/s of each and its ratio to batch 1. Then the model's forward pass alone
(random crops, no flip test, no decode or files) at batch 1 and at ``--batch``: how much of the loop's gain the
model itself gives on this device; the rest is per-call work (crops, decode, Python) that batching spreads out.

  Target: batching gives at least 2x the people/s of batch 1.

Run: ``python bench/predict_speed.py [--size tiny] [--input 256 192] [--images 48] [--batch 8] [--device cpu]``
(about a minute on 2 CPU cores); on a GPU: ``--device cuda --size 0.4b --input 1024 768`` (bench/gpu_check.sh).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from datamodules.synthetic import ensure_dataset  # noqa: E402
from sapiens2_ft.predict.boxes import FileBoxes, read_boxes  # noqa: E402
from sapiens2_ft.predict.inputs import list_images  # noqa: E402
from sapiens2_ft.predict.run import Model, predict_images  # noqa: E402
from sapiens2_ft.tasks.pose.module import PoseModule  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--size", default="tiny")
    parser.add_argument("--input", type=int, nargs=2, default=[256, 192])
    parser.add_argument("--images", type=int, default=48)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    parser.add_argument("--data", default="data/bench-predict")
    args = parser.parse_args()

    root = Path(args.data)
    ensure_dataset(root, args.images, seed=7, val_fraction=0.0)
    images = list_images(root / "train" / "images")
    ids, boxes = read_boxes(root / "annotations" / "train.json", list(images))
    people = sum(len(b) for b in boxes.values())
    module = PoseModule(size=args.size, keypoints="coco17", input_size=tuple(args.input))
    module.configure_model()
    module = module.eval().to(args.device)
    out = Path("/tmp/predict_speed")
    settings = {"batch 1": (1, 0), f"batch {args.batch}": (args.batch, 0),
                f"batch {args.batch} + {args.workers} decode threads": (args.batch, args.workers)}
    device_type = torch.device(args.device).type

    def run(batch: int, workers: int) -> float:
        start = time.perf_counter()
        with contextlib.redirect_stderr(io.StringIO()), torch.autocast(
                device_type, dtype=torch.bfloat16, enabled=args.precision == "bf16"):
            predict_images([Model(module.inference, "pose", out)], images, batch, FileBoxes(boxes), ids, workers=workers)
        if device_type == "cuda":
            torch.cuda.synchronize()
        return people / (time.perf_counter() - start)

    for batch, workers in settings.values():
        run(batch, workers)  # warm-up
    rates = {name: [] for name in settings}
    for _ in range(args.rounds):
        for name, (batch, workers) in settings.items():
            rates[name].append(run(batch, workers))
    print(f"pose predict, {args.size} at {args.input[0]}x{args.input[1]}, {args.device} {args.precision}, "
          f"{len(images)} images, {people} people, median of {args.rounds} rounds:")
    base = statistics.median(rates["batch 1"])
    for name, values in rates.items():
        rate = statistics.median(values)
        print(f"  {name:<32} {rate:8.1f} people/s   x{rate / base:.2f}")
    forward = {batch: forward_rate(module.model, batch, args.input, args.device, args.rounds) for batch in (1, args.batch)}
    print(f"  model forward alone: batch 1 {forward[1]:.1f} crops/s, "
          f"batch {args.batch} {forward[args.batch]:.1f} crops/s   x{forward[args.batch] / forward[1]:.2f}")


@torch.no_grad()
def forward_rate(model, batch: int, input_size, device: str, rounds: int, seconds: float = 2.0) -> float:
    """Crops/s of ``model`` on random crops of ``batch``: the median of ``rounds`` windows of ``seconds``."""
    crops = torch.randn(batch, 3, *input_size, device=device)
    model(crops)  # warm-up
    rates = []
    for _ in range(rounds):
        start, calls = time.perf_counter(), 0
        while time.perf_counter() - start < seconds:
            model(crops)
            calls += 1
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize()
        rates.append(calls * batch / (time.perf_counter() - start))
    return statistics.median(rates)


if __name__ == "__main__":
    main()
