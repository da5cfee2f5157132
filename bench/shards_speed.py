"""Training samples/s at 1024x768 read from tar shards (``data.shards``) against the image files.

Data: ``--images`` JPEGs of 1280x960 (smooth gradients with noise, ~0.3 MiB each, like photos), two people each,
as a COCO json; the same data written by ``write_shards`` into shards of ``--shard_samples`` images. Each case
iterates the training loader of a ``PoseDataModule`` (full augmentation, crop to 1024x768) for ``--samples``
samples with ``--workers`` workers: the files, the local shards, and the shards served over HTTP from this machine
(a stand-in for object storage: the first pass downloads them into the cache, the later ones read the cache).
Cases alternate round by round (files and local shards swap places every round), so that the load of a shared
machine hits each alike; medians and the median per-round ratios to the files are printed.

Run: ``python bench/shards_speed.py [--images 96 --samples 96 --workers 2 --rounds 3]``.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import cv2  # noqa: E402
import numpy as np  # noqa: E402

from datamodules.pose_datamodule import PoseDataModule  # noqa: E402
from datamodules.shards.writer import write_shards  # noqa: E402

NAMES = ["nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder", "right_shoulder", "left_elbow",
         "right_elbow", "left_wrist", "right_wrist", "left_hip", "right_hip", "left_knee", "right_knee",
         "left_ankle", "right_ankle"]
W, H = 1280, 960


def make_data(root: Path, images: int) -> None:
    rng = np.random.default_rng(0)
    yy, xx = np.mgrid[0:H, 0:W]
    for split, count in (("train", images), ("val", 4)):
        (root / split).mkdir(parents=True)
        records, annotations = [], []
        for i in range(count):
            base = (np.sin(xx / (30 + i % 11)) + np.cos(yy / (25 + i % 7))) * 50 + 128
            pixels = np.clip(np.stack([base, base * 0.8, base * 0.6], -1) + rng.normal(0, 6, (H, W, 1)), 0, 255)
            cv2.imwrite(str(root / split / f"{i:06d}.jpg"), pixels.astype(np.uint8))
            records.append({"id": i + 1, "file_name": f"{i:06d}.jpg", "width": W, "height": H})
            for _ in range(2):
                w, h = rng.uniform(200, 500), rng.uniform(400, 900)
                x, y = rng.uniform(0, W - w), rng.uniform(0, H - h)
                points = np.stack([rng.uniform(x, x + w, 17), rng.uniform(y, y + h, 17), np.full(17, 2)], 1)
                annotations.append({"id": len(annotations) + 1, "image_id": i + 1, "category_id": 1, "iscrowd": 0,
                                    "keypoints": points.ravel().round(2).tolist(), "bbox": [x, y, w, h]})
        (root / "annotations").mkdir(exist_ok=True)
        (root / "annotations" / f"{split}.json").write_text(json.dumps({
            "images": records, "annotations": annotations,
            "categories": [{"id": 1, "name": "person", "keypoints": NAMES}]}))


def datamodule(root: Path, workers: int, **kwargs) -> PoseDataModule:
    return PoseDataModule(root=str(root), train_ann="annotations/train.json", train_images="train",
                          val_ann="annotations/val.json", val_images="val", input_size=(1024, 768), batch_size=8,
                          num_workers=workers, persistent_workers=False, **kwargs)


def samples_per_s(dm: PoseDataModule, samples: int) -> float:
    dm.setup("fit")
    loader = dm.train_dataloader()
    start, seen = time.perf_counter(), 0
    for batch in loader:
        seen += len(batch["image"])
        if seen >= samples:
            break
    return seen / (time.perf_counter() - start)


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:  # no line per request
        pass


def serve(folder: Path) -> str:
    handler = functools.partial(QuietHandler, directory=str(folder))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}/shards"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--images", type=int, default=96)
    parser.add_argument("--samples", type=int, default=96)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--shard_samples", type=int, default=16)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_data(root / "data", args.images)
        files = datamodule(root / "data", args.workers)
        files.setup("fit")
        write_shards(root / "shards", *files.shard_splits(), shard_samples=args.shard_samples)
        url = serve(root)
        shard_mib = sum(p.stat().st_size for p in (root / "shards").glob("*.tar")) / 2**20
        cases = {"files": lambda: datamodule(root / "data", args.workers),
                 "local shards": lambda: datamodule(root / "x", args.workers, shards=str(root / "shards")),
                 "HTTP, first pass": lambda: datamodule(root / "x", args.workers, shards=url,
                                                        shard_cache=str(root / "cache")),
                 "HTTP, cached": lambda: datamodule(root / "x", args.workers, shards=url,
                                                    shard_cache=str(root / "cache"))}
        rates = {name: [] for name in cases}
        local = ["files", "local shards"]
        for round in range(args.rounds):  # the local cases swap places every round; HTTP: first pass, then cached
            shutil.rmtree(root / "cache", ignore_errors=True)
            for name in local[::-1] if round % 2 else local:
                rates[name].append(samples_per_s(cases[name](), args.samples))
            for name in ("HTTP, first pass", "HTTP, cached"):
                rates[name].append(samples_per_s(cases[name](), args.samples))
        print(f"training samples/s at 1024x768 (full augmentation), {args.samples} samples a pass, {args.workers} "
              f"workers, {args.images} JPEGs of {W}x{H} in {len(list((root / 'shards').glob('*.tar')))} shards "
              f"({shard_mib:.0f} MiB); {args.rounds} rounds; load average {os.getloadavg()[0]:.1f}")
        print(f"{'case':<18} {'samples/s':>9} {'x files':>8}")
        for name, values in rates.items():
            ratio = statistics.median(v / f for v, f in zip(values, rates["files"]))
            print(f"{name:<18} {statistics.median(values):>9.1f} {ratio:>8.2f}")


if __name__ == "__main__":
    main()
