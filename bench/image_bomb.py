"""Peak memory of ``python -m sapiens2_ft.predict`` on a folder holding a 30000 x 30000 PNG (a 1-bit image of 110 kB
that decodes to 2.7 GB of RGB) among three 12-megapixel photos.

A tiny COCO-17 pose model (random weights, a checkpoint written here; the whole image is one person) predicts the
folder in a fresh process, whose peak
resident memory is reported (``getrusage`` of the finished child), with the default pixel limit (the PNG is
skipped by name from its header, never decoded) and, with ``--unlimited``, with ``--max_pixels`` above its size
(what predict did before the limit: the PNG decoded and predicted as an image).

  Target: with the default limit the PNG is skipped by name, the photos predicted, peak memory under 3 GiB.

Run: ``python bench/image_bomb.py [--unlimited] [--work /tmp/image_bomb]`` (about 35 s on 2 cores; ``--unlimited``
adds about 2 minutes and needs 9 GB of memory). Measured here: default limit 0.71 GiB, the PNG skipped by name;
``--unlimited`` 8.20 GiB, the PNG decoded and predicted as a person.
"""

from __future__ import annotations

import argparse
import struct
import subprocess
import sys
import zlib
from pathlib import Path

import cv2
import numpy as np
import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sapiens2_ft.models.checkpoints import RECORD_KEY, model_record  # noqa: E402
from sapiens2_ft.tasks.pose.module import PoseModule  # noqa: E402

SIDE = 30000
PEAK = ("import resource, subprocess, sys; code = subprocess.run(sys.argv[1:]).returncode; "
        "print(f'peak {resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 2**20:.2f} GiB'); sys.exit(code)")


def png_bomb(path: Path, side: int) -> None:
    """A 1-bit ``side`` x ``side`` PNG of zeros."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    rows, compress = bytes(1 + (side + 7) // 8) * 1000, zlib.compressobj(9)
    data = b"".join(compress.compress(rows) for _ in range(side // 1000)) + compress.flush()
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0))
                     + chunk(b"IDAT", data) + chunk(b"IEND", b""))


def tiny_checkpoint(path: Path) -> None:
    module = PoseModule(size="tiny", keypoints="coco17", input_size=(256, 192))
    module.configure_model()
    torch.save({"state_dict": module.state_dict(), RECORD_KEY: model_record(module), "global_step": 0, "epoch": 0,
                "hyper_parameters": {"input_size": [256, 192]}}, path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--unlimited", action="store_true", help="also predict with the limit above the PNG's size")
    parser.add_argument("--work", default="/tmp/image_bomb")
    args = parser.parse_args()
    work = Path(args.work)
    photos = work / "photos"
    photos.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    for i in range(3):
        cv2.imwrite(str(photos / f"photo{i}.jpg"), rng.integers(0, 255, (3000, 4000, 3), dtype=np.uint8))
    png_bomb(photos / "bomb.png", SIDE)
    print(f"{photos}: 3 photos of 4000x3000 and bomb.png, {SIDE}x{SIDE}, "
          f"{(photos / 'bomb.png').stat().st_size:,} bytes")
    tiny_checkpoint(work / "pose.ckpt")
    variants = {"default limit": []}
    if args.unlimited:
        variants["--max_pixels 1000000000"] = ["--max_pixels", "1000000000"]
    for name, extra in variants.items():
        out = work / ("out_" + name.split()[0].strip("-"))
        command = [sys.executable, "-m", "sapiens2_ft.predict", "--model", str(work / "pose.ckpt"), "--input",
                   str(photos), "--out", str(out), "--device", "cpu", *extra]
        result = subprocess.run([sys.executable, "-c", PEAK, *command], capture_output=True, text=True)
        lines = result.stdout.strip().splitlines()
        print(f"{name}: exit {result.returncode}, {lines[-1] if lines else ''}\n  {lines[-2] if len(lines) > 1 else ''}"
              + (f"\n  {result.stderr.strip().splitlines()[-1]}" if result.returncode else ""))


if __name__ == "__main__":
    main()
