"""The lowest pointmap L2 a prediction blind to the camera's focal length can score: the true canonical pointmap
of each val image brought to metres with one focal for all (the best one), as a model that infers nothing about
the focal would. The synthetic renders draw the focal at random (0.9-1.7 x the image's longer side) and place
each person at a distance proportional to it, so that the person's size in the image does not reveal it.

    python bench/pointmap_focal_floor.py                       # the demo's val split (data/synthetic)
    python bench/pointmap_focal_floor.py --root data/synthetic-heldout --split val

Metric scale = canonical / scale with scale = canonical focal / true focal (``to_metric``): a guessed focal g in
place of the true f scales the points by g / f, an L2 error of |P| |g / f - 1| a pixel.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sapiens2_ft.tasks.dense_data import DenseTaskData  # noqa: E402  (the path above first)
from sapiens2_ft.tasks.pointmap.module import to_metric  # noqa: E402


def focal_blind_floor(ranges: list[torch.Tensor], focals: torch.Tensor) -> tuple[float, float]:
    """(L2 in m, focal in px): the pixel-pooled mean of |P| |g / f - 1| at its best constant focal g, from each
    image's per-pixel distances ``ranges`` (|P| in m) and true focal ``focals``. The sum is piecewise linear in g
    with its kinks at the true focals (a weighted median), so the best g is one of them."""
    sums = torch.stack([r.double().sum() for r in ranges])  # the error is linear in |P| within an image
    count = sum(len(r) for r in ranges)
    guesses = focals.double().unique()
    errors = ((guesses[:, None] / focals.double()[None] - 1).abs() * sums[None]).sum(1) / count
    best = int(errors.argmin())
    return float(errors[best]), float(guesses[best])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", default=str(ROOT / "data/synthetic"))
    parser.add_argument("--split", default="val")
    args = parser.parse_args()
    dm = DenseTaskData("pointmap", root=args.root, val_split=args.split, input_size=(256, 192), batch_size=16,
                         num_workers=0)
    dm.setup("validate")
    ranges, focals = [], []
    for batch in dm.val_dataloader():
        points = to_metric(batch["pointmap"], batch["scale"])
        mask = batch["mask"].reshape(len(points), -1).bool()
        for i in range(len(points)):
            ranges.append(points[i].reshape(3, -1)[:, mask[i]].norm(dim=0))
        focals.append(batch["intrinsics"][:, 0, 0].double())  # of the output image
    focals = torch.cat(focals)
    floor, guess = focal_blind_floor(ranges, focals)
    print(f"{len(ranges)} images, focal {float(focals.min()):.0f}-{float(focals.max()):.0f} px, mean |P| "
          f"{float(sum(r.sum() for r in ranges) / sum(len(r) for r in ranges)):.2f} m")
    print(f"focal-blind floor: L2 {floor:.3f} m (a perfect canonical pointmap, one focal of {guess:.0f} px for all)")


if __name__ == "__main__":
    main()
