"""The README's demo picture: the first validation overlay of each demo run, stacked.

``python tools/demo_panels.py RUN_DIR [RUN_DIR ...] [--out docs/images/demo_panels.jpg] [--width 900]``: each run
directory's ``overlays/*_0.png`` (written by every demo at its last validation), scaled to ``--width`` when wider and
padded on the right when narrower, top to bottom in the order given.
"""

from __future__ import annotations

import argparse
from pathlib import Path

import cv2
import numpy as np


def first_overlay(run_dir: Path) -> np.ndarray:
    found = sorted((run_dir / "overlays").glob("*_0.png"))
    if not found:
        raise SystemExit(f"{run_dir}: no overlays/*_0.png (a demo run writes them at its validation)")
    return cv2.imread(str(found[0]))


def fit_width(image: np.ndarray, width: int) -> np.ndarray:
    h, w = image.shape[:2]
    if w > width:
        return cv2.resize(image, (width, round(h * width / w)), interpolation=cv2.INTER_AREA)
    pad = np.full((h, width - w, 3), 24, np.uint8)  # the overlays' dark background
    return np.concatenate([image, pad], axis=1)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, default=Path("docs/images/demo_panels.jpg"))
    parser.add_argument("--width", type=int, default=900)
    args = parser.parse_args(argv)
    picture = np.concatenate([fit_width(first_overlay(run), args.width) for run in args.runs], axis=0)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(args.out), picture, [cv2.IMWRITE_JPEG_QUALITY, 85])
    print(f"wrote {args.out} ({picture.shape[1]}x{picture.shape[0]}) from {len(args.runs)} runs")


if __name__ == "__main__":
    main()
