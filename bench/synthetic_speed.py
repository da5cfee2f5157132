"""Benchmark the synthetic dataset generator on one CPU thread.

    python bench/synthetic_speed.py [--num 100] [--height 256] [--width 192]

Generates into a temporary directory (deleted afterwards) and prints ms/image and
images/s, for the full output (all dense files, supersampled alpha, COCO json).
"""

import os

for _variable in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMEXPR_NUM_THREADS"):
    os.environ[_variable] = "1"

import argparse  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import cv2  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from datamodules.synthetic import generate_dataset, render_sample  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--num", type=int, default=100)
    parser.add_argument("--height", type=int, default=256)
    parser.add_argument("--width", type=int, default=192)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    cv2.setNumThreads(1)
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})

    render_sample(args.seed, 0, args.height, args.width)  # warm-up (imports, caches)
    start = time.perf_counter()
    for index in range(args.num):
        render_sample(args.seed, index, args.height, args.width)
    render_seconds = time.perf_counter() - start

    with tempfile.TemporaryDirectory(prefix="synthetic_speed_") as scratch:
        start = time.perf_counter()
        generate_dataset(Path(scratch) / "data", args.num, args.seed, args.height, args.width, progress=False)
        total_seconds = time.perf_counter() - start

    print(f"synthetic generator, {args.num} images at {args.height}x{args.width}, 1 thread")
    for label, seconds in (("render only ", render_seconds), ("with writing", total_seconds)):
        print(f"  {label}: {1000 * seconds / args.num:7.1f} ms/image  {args.num / seconds:6.1f} images/s")


if __name__ == "__main__":
    main()
