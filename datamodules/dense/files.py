"""Dense-task files: list a split's samples, and the readers the target specs share.

Layout (every path relative to ``root``; files matched by stem ``NAME``)::

    root/{split}/images/NAME.png|jpg|jpeg
    root/{split}/labels/NAME.png        uint8 class ids, 255 = ignore                  (seg)
    root/{split}/normals/NAME.npy       HxWx3 float camera-space unit normals          (normal)
    root/{split}/masks/NAME.png         0/255 valid-pixel mask                         (normal, pointmap;
                                        default when absent: every pixel valid)
    root/{split}/depth/NAME.npy         HxW z-depth  + intrinsics/NAME.txt (3x3 K)     (pointmap)
      or root/{split}/pointmaps/NAME.npy  HxWx3 camera XYZ (+ optional intrinsics/NAME.txt)
    root/{split}/alpha/NAME.png         uint8 matte  + optional foreground/NAME.png RGB (matting)

Which files a task reads, and how, is its target spec (``dense/targets/<task>.py``). Camera convention (as the
synthetic generator): OpenCV pinhole, x right, y down, z forward; pixel (row i, col j) has its centre at
(u=j, v=i). Every problem raises :class:`DataError` naming the file.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from datamodules.dense.targets import target_spec
from datamodules.errors import DataError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


@dataclass(frozen=True)
class DenseSample:
    """One image and the target files of one task (``files``: kind -> path; optional kinds may be absent)."""

    name: str
    image: Path
    files: dict[str, Path] = field(default_factory=dict)


def list_images(split_dir: Path) -> list[Path]:
    """The images of a split folder (``split_dir/images``), sorted."""
    return sorted(p for p in (split_dir / "images").iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)


def list_samples(root, split: str, task: str,
                 on_bad_sample: Literal["error", "skip"] = "error") -> tuple[list[DenseSample], Counter]:
    """Samples of ``root/split`` for ``task``, sorted by name, plus a Counter of skipped reasons.

    An image without a required target file raises DataError (``on_bad_sample="error"``) or is skipped.
    """
    spec = target_spec(task)
    split_dir = Path(root) / split
    image_dir = split_dir / "images"
    if not image_dir.is_dir():
        raise DataError(f"image folder not found: {image_dir}")
    images = list_images(split_dir)
    names = [p.stem for p in images]
    duplicated = {n for n in names if names.count(n) > 1}
    if duplicated:
        raise DataError(f"{image_dir}: several images share the stem(s) {sorted(duplicated)[:5]}")
    samples, skipped = [], Counter()
    for image in images:
        required, optional = spec.paths(split_dir, image.stem)
        missing = [path for path in required.values() if not path.is_file()]
        if missing:
            if on_bad_sample == "error":
                raise DataError(f"{image}: target file not found: {missing[0]}")
            skipped["missing target file"] += 1
            continue
        files = {**required, **{k: v for k, v in optional.items() if v.is_file()}}
        samples.append(DenseSample(image.stem, image, files))
    if not samples:
        raise DataError(f"{image_dir}: no usable images for task {task!r} (skipped: {dict(skipped)})")
    return samples, skipped
