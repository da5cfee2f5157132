"""Benchmark the dense training sample pipeline on one core, nearest warps by the data layer's gather (now) against
OpenCV's INTER_NEAREST (before: its result depends on the CPU's code path), timed in alternation.

Per sample what ``DenseDataset.__getitem__`` does for training: read the image and its targets, the task's training
pipeline with every geometric step on (scale, crop, rotation where the task allows it, flip), image ops, tensors.

Data: synthetic scenes (``datamodules.synthetic``) in a temp dir. The pose pipeline warps only images (its keypoints
move analytically), so the change does not touch it.

Run: ``python bench/dense_pipeline.py [--samples N] [--rounds R] [--input-size H W]``.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cv2  # noqa: E402
import torch  # noqa: E402

from bench.timing import paired  # noqa: E402
from datamodules.dense import augment as dense_augment, geometry as dense_geometry  # noqa: E402
from datamodules.dense.files import list_samples  # noqa: E402
from datamodules.dense_dataset import DenseDataset  # noqa: E402
from datamodules.synthetic import generate_dataset  # noqa: E402
from sapiens2_ft.tasks.dense_data import dense_targets  # noqa: E402

GEOMETRY = {"seg": dict(scale_prob=1.0, crop_prob=0.3, rotate_prob=0.5),
            "normal": dict(scale_prob=1.0, crop_prob=1.0, rotate_prob=0.5),
            "pointmap": dict(scale_prob=1.0, crop_prob=1.0),
            "matting": {}}


def opencv_nearest(array, matrix, size, border=0):
    """The code before: OpenCV's nearest warp (bool maps through uint8)."""
    work = array.astype("uint8") if array.dtype == bool else array
    out = cv2.warpAffine(work, matrix, (int(size[1]), int(size[0])), flags=cv2.INTER_NEAREST,
                         borderMode=cv2.BORDER_CONSTANT, borderValue=int(border) if array.dtype == bool else border)
    return out > 0 if array.dtype == bool else out


def use(nearest) -> None:
    dense_geometry.warp_nearest = dense_augment.warp_nearest = nearest


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=24, help="samples per timed pass")
    parser.add_argument("--rounds", type=int, default=7, help="alternating pairs per task")
    parser.add_argument("--input-size", type=int, nargs=2, default=(256, 192))
    args = parser.parse_args()
    torch.set_num_threads(1)
    cv2.setNumThreads(1)
    gather = dense_geometry.warp_nearest
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "synthetic"
        generate_dataset(root, 8, seed=0, progress=False)
        print(f"dense training samples/s on one core, input {tuple(args.input_size)}, {args.samples} samples a pass, "
              f"median of {args.rounds} alternating pairs")
        print(f"{'task':<9} {'opencv (before)':>16} {'gather (now)':>13} {'now / before':>13}")
        for task, geometry in GEOMETRY.items():
            samples, _ = list_samples(root, "train", dense_targets(task))
            dataset = DenseDataset(samples, dense_targets(task), tuple(args.input_size), augment=geometry)

            def one_pass(nearest):
                def run():
                    use(nearest)
                    for i in range(args.samples):
                        dataset[(i % len(samples), i)]
                return run

            before, now, ratio = paired(one_pass(opencv_nearest), one_pass(gather), args.rounds)
            use(gather)
            print(f"{task:<9} {args.samples / before:>16.1f} {args.samples / now:>13.1f} {1 / ratio:>13.3f}")


if __name__ == "__main__":
    main()
