"""Render the procedural synthetic human dataset (COCO keypoints + dense targets).

Usage: python -m datamodules.synthetic --out DIR --num N --seed S [--val_fraction F] [--height H --width W]
"""

import argparse
import json

from .generate import generate_dataset


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(prog="python -m datamodules.synthetic", description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="output directory (new, empty, or a previous synthetic dataset)")
    parser.add_argument("--num", type=int, required=True, help="number of images")
    parser.add_argument("--seed", type=int, default=0, help="random seed")
    parser.add_argument("--val_fraction", type=float, default=0.2, help="fraction of images (the last ones) in val")
    parser.add_argument("--height", type=int, default=256)
    parser.add_argument("--width", type=int, default=192)
    parser.add_argument("--no_progress", action="store_true", help="hide the progress bar")
    args = parser.parse_args(argv)
    try:
        summary = generate_dataset(args.out, args.num, args.seed, args.height, args.width, args.val_fraction,
                                   progress=not args.no_progress)
    except (FileExistsError, ValueError) as error:
        parser.exit(2, f"error: {error}\n")
    print(json.dumps(summary, indent=2))
    return summary


if __name__ == "__main__":
    main()
