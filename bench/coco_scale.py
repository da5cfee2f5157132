"""COCO-size pose data: start-up time, main-process memory, and DataLoader worker memory over an epoch.

``build`` writes a COCO-2017-sized keypoints json (56,599 images, 149,813 people, no polygons: ~70 MiB) for train
and for val, and one small JPEG hard-linked under every file name of a split. ``startup`` times ``prepare_data`` +
``setup("fit")`` of a ``PoseDataModule`` on both jsons in fresh processes: this checkout with an empty index cache
(the first build), from the cache, and, with ``--compare DIR``, another checkout (``/work/main``: the loader before
the cache), each round side by side so that the load of a shared machine hits every case alike; it reports medians
and the ratios to the compared checkout, and the resident memory after the imports and after ``setup``. ``workers``
iterates the training loader for an epoch (or ``--batches``) with ``--workers`` workers and reports each worker's
unique memory (USS) after the first batches and at the end: growth there is the copy-on-read of Python objects the
dataset holds. ``--index_only`` reads each sample's instance record without decoding or augmenting (the part that
copies pages; a whole epoch in a few minutes), else the full training pipeline runs.

Run::

    python bench/coco_scale.py build --out /tmp/coco-scale
    python bench/coco_scale.py startup --data /tmp/coco-scale --compare /work/main --rounds 3
    python bench/coco_scale.py workers --data /tmp/coco-scale --workers 4 [--index_only]
    PYTHONPATH=/work/main python bench/coco_scale.py workers --data /tmp/coco-scale --index_only --compare main

Targets (issue 53): from the cache <= 3 s; the first build no slower than the compared loader; worker USS growth
<= 10 MiB over an epoch; the main process holds <= 300 MiB for the data (RSS after setup minus after imports).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
NAMES = ["nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder", "right_shoulder", "left_elbow",
         "right_elbow", "left_wrist", "right_wrist", "left_hip", "right_hip", "left_knee", "right_knee",
         "left_ankle", "right_ankle"]
SIZE = (320, 240)  # W, H of the one JPEG
MIB = 2**20


def build(out: Path, images: int, people: int, seed: int = 0) -> None:
    """Train and val jsons of ``images`` images and ``people`` person annotations each, one JPEG under every name."""
    import cv2

    rng = np.random.default_rng(seed)
    (out / "annotations").mkdir(parents=True, exist_ok=True)
    pixels = rng.integers(0, 255, (SIZE[1], SIZE[0], 3), np.uint8)
    for split in ("train", "val"):
        jpg = out / f"one-{split}.jpg"  # one file per split: a file system allows ~65,000 links to one file
        cv2.imwrite(str(jpg), pixels)
        folder = out / split
        folder.mkdir(exist_ok=True)
        records = [{"id": i + 1, "file_name": f"{i + 1:012d}.jpg", "width": SIZE[0], "height": SIZE[1]}
                   for i in range(images)]
        for record in records:
            target = folder / record["file_name"]
            if not target.exists():
                os.link(jpg, target)
        owner = np.sort(rng.integers(1, images + 1, people))
        annotations = []
        for k, image_id in enumerate(owner):
            w, h = rng.uniform(20, 150), rng.uniform(40, 220)
            x, y = rng.uniform(0, SIZE[0] - w), rng.uniform(0, SIZE[1] - h)
            points = np.stack([rng.uniform(x, x + w, 17), rng.uniform(y, y + h, 17), rng.integers(0, 3, 17)], 1)
            annotations.append({"id": k + 1, "image_id": int(image_id), "category_id": 1, "iscrowd": 0,
                                "keypoints": [round(float(v), 2) for v in points.ravel()],
                                "num_keypoints": int((points[:, 2] > 0).sum()), "area": round(w * h, 2),
                                "bbox": [round(x, 2), round(y, 2), round(w, 2), round(h, 2)]})
        data = {"images": records, "annotations": annotations,
                "categories": [{"id": 1, "name": "person", "supercategory": "person", "keypoints": NAMES,
                                "skeleton": []}]}
        path = out / "annotations" / f"{split}.json"
        path.write_text(json.dumps(data))
        print(f"{path}: {images} images, {people} people, {path.stat().st_size / MIB:.0f} MiB")


def memory() -> tuple[float, float]:
    import psutil

    info = psutil.Process().memory_full_info()
    return info.rss / MIB, info.uss / MIB


def datamodule(data: Path, workers: int, cached: bool | None):
    """A PoseDataModule on ``data``; ``cached`` None: a checkout without the index cache."""
    from datamodules.pose_datamodule import PoseDataModule

    options = {} if cached is None else {"index_cache": cached}
    return PoseDataModule(root=str(data), train_ann="annotations/train.json", train_images="train",
                          val_ann="annotations/val.json", val_images="val", num_workers=workers, batch_size=32,
                          persistent_workers=False, **options)


def child_setup(args) -> None:
    """One start-up, in this process: prints seconds and memory as JSON."""
    import datamodules.pose_datamodule  # noqa: F401 (imports before the baseline)

    cached = None if args.mode == "compared" else True
    rss_import, _ = memory()
    start = time.perf_counter()
    dm = datamodule(args.data, 0, cached)
    dm.prepare_data()
    dm.setup("fit")
    seconds = time.perf_counter() - start
    rss, uss = memory()
    print(json.dumps({"seconds": seconds, "rss_import": rss_import, "rss": rss, "uss": uss,
                      "instances": len(dm.train_set) + len(dm.val_set)}))


def run_child(checkout: Path, *args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(checkout), "NO_ALBUMENTATIONS_UPDATE": "1"}
    out = subprocess.run([sys.executable, str(Path(__file__).resolve()), *args], env=env, check=True,
                         capture_output=True, text=True, cwd=checkout)
    return json.loads(out.stdout.strip().splitlines()[-1])


def clear_cache(data: Path) -> None:
    shutil.rmtree(data / "annotations" / ".sapiens2_ft_cache", ignore_errors=True)


def startup(args) -> None:
    cases: dict[str, list[dict]] = {"first build": [], "from cache": []}
    if args.compare:
        cases["compared"] = []
    for _ in range(args.rounds):
        clear_cache(args.data)
        cases["first build"].append(run_child(REPO, "_setup", "--data", str(args.data), "--mode", "first"))
        cases["from cache"].append(run_child(REPO, "_setup", "--data", str(args.data), "--mode", "cached"))
        if args.compare:
            cases["compared"].append(run_child(Path(args.compare), "_setup", "--data", str(args.data), "--mode",
                                               "compared"))
    print(f"COCO-size start-up, prepare_data + setup('fit') of train + val ({cases['from cache'][0]['instances']} "
          f"instances), {args.rounds} rounds side by side; load average {os.getloadavg()[0]:.1f}")
    print(f"{'case':<12} {'seconds':>8} {'x compared':>10} {'RSS import':>10} {'RSS after':>9} {'data':>6} (MiB)")
    for name, runs in cases.items():
        seconds = statistics.median(r["seconds"] for r in runs)
        ratio = (statistics.median(r["seconds"] / c["seconds"] for r, c in zip(runs, cases["compared"]))
                 if args.compare else float("nan"))
        rss_import, rss = (statistics.median(r[k] for r in runs) for k in ("rss_import", "rss"))
        print(f"{name:<12} {seconds:>8.2f} {ratio:>10.2f} {rss_import:>10.0f} {rss:>9.0f} {rss - rss_import:>6.0f}")


class IndexOnly:
    """The training set's instance records read per sample, as the dataset's ``item`` reads them, without images."""

    def __init__(self, dataset):
        self.instances = dataset.instances

    def __len__(self) -> int:
        return len(self.instances)

    def __getitem__(self, key):
        import torch

        inst = self.instances[key[0] if isinstance(key, tuple) else key]
        return torch.tensor([len(inst.image_path), inst.image_id, float(inst.keypoints.sum()),
                             float(inst.visibility.sum()), *inst.bbox])


def workers(args) -> None:
    import psutil
    import torch

    from datamodules.loaders import make_loader

    torch.manual_seed(0)
    dm = datamodule(args.data, args.workers, None if args.compare else True)
    dm.prepare_data()
    dm.setup("fit")
    dataset = IndexOnly(dm.train_set) if args.index_only else dm.train_set
    loader = make_loader(dataset, 32, True, args.workers, False, False)
    total = len(loader) if args.batches is None else min(args.batches, len(loader))
    first, start = None, time.perf_counter()
    batches = iter(loader)
    for step in range(total):
        next(batches)
        if step == 20:
            pids = [w.pid for w in batches._workers]
            first = [psutil.Process(p).memory_full_info().uss / MIB for p in pids]
    last = [psutil.Process(p).memory_full_info().uss / MIB for p in pids]
    seconds = time.perf_counter() - start
    rss, _ = memory()
    grown = [b - a for a, b in zip(first, last)]
    print(json.dumps({"checkout": str(REPO if not args.compare else os.environ.get("PYTHONPATH")),
                      "batches": total, "of": len(loader), "index_only": args.index_only,
                      "samples_per_s": round(total * 32 / seconds), "uss_after_20": [round(v, 1) for v in first],
                      "uss_end": [round(v, 1) for v in last], "growth_max": round(max(grown), 1),
                      "main_rss": round(rss), "load": round(os.getloadavg()[0], 1)}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    b = commands.add_parser("build")
    b.add_argument("--out", type=Path, required=True)
    b.add_argument("--images", type=int, default=56_599)
    b.add_argument("--people", type=int, default=149_813)
    for name in ("startup", "_setup", "workers"):
        c = commands.add_parser(name)
        c.add_argument("--data", type=Path, required=True)
        c.add_argument("--rounds", type=int, default=3)
        c.add_argument("--compare", default=None)
        c.add_argument("--mode", default="first")
        c.add_argument("--workers", type=int, default=4)
        c.add_argument("--batches", type=int, default=None)
        c.add_argument("--index_only", action="store_true")
    args = parser.parse_args()
    if args.command == "build":
        build(args.out, args.images, args.people)
    elif args.command == "_setup":
        child_setup(args)
    elif args.command == "startup":
        startup(args)
    else:
        workers(args)


if __name__ == "__main__":
    main()
