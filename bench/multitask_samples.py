"""Multi-task pretraining samples on one core: the image decoded once for the four dense tasks' targets (as
``MultiTaskDataset.item`` does) against once per task (the code before 2026-12-07), alternated.

    python bench/multitask_samples.py --root data/synthetic-pretrain [--samples 38] [--rounds 5]

Uses a synthetic dataset already at ``--root`` (``python tools/pretrain_demo_backbone.py`` renders one); the
recipe's light pose crops. Prints ms a sample for each and the median per-round ratio.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from timing import paired  # noqa: E402

from datamodules.dense_dataset import load_sample, to_item  # noqa: E402
from datamodules.transforms.topdown import TopdownAugment  # noqa: E402
from sapiens2_ft.tasks.multitask.data import PretrainingData  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=Path("data/synthetic-pretrain"))
    parser.add_argument("--samples", type=int, default=38)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.set_num_threads(1)
    dm = PretrainingData(root=str(args.root), input_size=(256, 192), batch_size=16, num_workers=0,
                             pose_augment=TopdownAugment(rotate_factor=30.0, scale_range=(0.75, 1.25),
                                                         half_body_prob=0.0, dropout_prob=0.0))
    dm.setup("fit")
    dataset = dm.sets["train"]

    def per_task_reads(index: int, rng) -> dict:  # each task's targets with its own decode of the image
        name, data = dataset.names[index], {}
        for task, spec in dataset.targets.items():
            data.update(load_sample(dataset.dense[task][name], spec, 29))
        data = dataset.transform(data, rng)
        item = {"name": name, dataset.crops: dataset.pose.item(index, rng)}
        for task, spec in dataset.targets.items():
            item[task] = to_item(data, spec)
        return item

    indices = np.linspace(0, len(dataset) - 1, args.samples).astype(int)
    before = lambda: [per_task_reads(i, np.random.default_rng(i)) for i in indices]  # noqa: E731
    now = lambda: [dataset.item(i, np.random.default_rng(i)) for i in indices]  # noqa: E731
    t_before, t_now, ratio = paired(before, now, args.rounds)
    print(f"one decode per task: {t_before / len(indices) * 1e3:.1f} ms a sample; one decode per image: "
          f"{t_now / len(indices) * 1e3:.1f} ms (x{ratio:.2f}, median of {args.rounds} alternated rounds)")


if __name__ == "__main__":
    main()
