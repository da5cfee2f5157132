"""What the per-run pictures cost: the data-check sheet of a run's first batch, one validation's diagnostics, and
the results page drawn at the end of a run.

- Sheet: ``DataSheet`` draws the first 16 samples of the first training batch once per run. Timed here on real
  augmented batches of the pose and seg data modules (synthetic data rendered into a temporary folder) at
  ``--input``: ``data_sheet`` + ``write_sheet``, the callback's work.
- Diagnostics: ``ValidationDiagnostics`` draws and writes one validation's tables and charts. Timed here with the
  drawing functions the metrics call, on inputs of the real sizes (17 COCO keypoints, a 29-class confusion
  matrix, the normal metric's 180 one-degree bins) filled with random values: the cost depends on the sizes,
  not on the values.
- Results page: ``write_results_png`` of a 200-step ``metrics.csv`` with the pointmap task's columns (8 loss
  terms, 6 metric families, learning rate, speed, memory: 12 panels), random values.

Each figure is the median of ``--repeats`` calls after one warm-up call (matplotlib's first figure is slower).

Run: ``python bench/run_extras.py [--input 256 192] [--repeats 5]`` (about a minute on 2 cores).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
from timing import median_seconds

from datamodules.body_parts import SAPIENS2_PART_CLASSES
from datamodules.keypoints.metainfo import load_metainfo
from datamodules.pose_datamodule import PoseDataModule
from datamodules.synthetic import generate_dataset
from sapiens2_ft.tasks.dense_data import DenseTaskData
from sapiens2_ft.tasks.diagnostics import Bins, Diagnostics, confusion_image, error_histogram, keypoint_bar_chart
from sapiens2_ft.tasks.sample_sheet import data_sheet, sheet_labels, split_batch, write_sheet
from sapiens2_ft.training.callbacks.data_sheet import MAX_SHEET_SAMPLES
from sapiens2_ft.training.callbacks.diagnostics import write_diagnostics
from sapiens2_ft.training.results_page import write_results_png



def sheet_seconds(task: str, datamodule, out: Path, repeats: int) -> float:
    datamodule.setup("fit")
    batch = next(iter(datamodule.train_dataloader()))
    items = split_batch(batch, MAX_SHEET_SAMPLES)
    labels = sheet_labels(datamodule)
    return median_seconds(lambda: write_sheet(data_sheet(task, items, labels), out / f"{task}.png"), repeats)


def write_metrics_csv(path: Path, rng, steps: int = 200, val_every: int = 50) -> None:
    """A Lightning-style ``metrics.csv``: train columns every step, val columns every ``val_every`` steps."""
    terms = ["loss", "l1", "multiscale_l1", "shift_invariant_l1", "silog", "normal", "intrinsics", "scale"]
    metrics = ["l2", "mae_x", "mae_y", "mae_z", "rmse", "within_5cm", "within_10cm", "within_20cm", "normal_angle"]
    train = [f"train/{t}" for t in terms] + ["lr-AdamW/head", "train/samples_per_s", "system/peak_memory_gib"]
    val = [f"val/{t}" for t in terms + metrics]
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        f.write(",".join(["epoch", "step", *train, *val]) + "\n")
        for step in range(steps):
            f.write(",".join(["0", str(step), *map(str, rng.random(len(train))), *[""] * len(val)]) + "\n")
            if (step + 1) % val_every == 0:
                f.write(",".join(["0", str(step), *[""] * len(train), *map(str, rng.random(len(val)))]) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--input", type=int, nargs=2, default=[256, 192], help="network input (H, W)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    size = tuple(args.input)
    rng = np.random.default_rng(0)
    with tempfile.TemporaryDirectory() as tmp:
        root, out = Path(tmp) / "data", Path(tmp) / "out"
        out.mkdir()
        generate_dataset(root, 40, seed=0, progress=False)
        common = dict(root=str(root), input_size=size, batch_size=MAX_SHEET_SAMPLES, num_workers=0)
        rows = [("data sheet, pose (16 samples + flipped copies)", sheet_seconds("pose", PoseDataModule(**common),
                                                                                 out, args.repeats)),
                ("data sheet, seg (16 samples)", sheet_seconds("seg", DenseTaskData("seg", **common), out,
                                                               args.repeats))]

        names = load_metainfo("coco17").keypoint_names
        oks, pck = rng.random(len(names)), rng.random(len(names))
        classes = list(SAPIENS2_PART_CLASSES)
        confusion = rng.integers(0, 10_000, (len(classes), len(classes)))
        counts = rng.integers(0, 10_000, 180)

        def pose():
            write_diagnostics(out / "pose", Diagnostics(images={"keypoints": keypoint_bar_chart(names, oks, pck, "x")}))

        def seg():
            write_diagnostics(out / "seg", Diagnostics(images={"confusion": confusion_image(confusion, classes, "x")}))

        def normal():
            write_diagnostics(out / "normal", error_histogram("angle_error", Bins(180.0, 180), counts, "deg", "x"))

        rows += [("diagnostics, pose (17 keypoints chart)", median_seconds(pose, args.repeats)),
                 ("diagnostics, seg (29-class confusion)", median_seconds(seg, args.repeats)),
                 ("diagnostics, normal (180-bin histogram)", median_seconds(normal, args.repeats))]
        run = out / "run"
        write_metrics_csv(run / "metrics.csv", rng)
        rows.append(("results page (12 panels, 200 steps)", median_seconds(lambda: write_results_png(run, "val/l2"),
                                                                           args.repeats)))
    print(f"input {size[0]}x{size[1]}, median of {args.repeats} after a warm-up:")
    for name, seconds in rows:
        print(f"  {name:<48} {seconds:6.2f} s")


if __name__ == "__main__":
    main()
