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

Which files a task reads, and how, is its target spec (``target_spec.TargetSpec``, handed down by the task). Camera
convention (as the
synthetic generator): OpenCV pinhole, x right, y down, z forward; pixel (row i, col j) has its centre at
(u=j, v=i). Every problem raises :class:`DataError` naming the file.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Literal, Sequence

from datamodules.columns import StringTable
from datamodules.dense.target_spec import TargetSpec
from datamodules.errors import DataError

IMAGE_SUFFIXES = (".png", ".jpg", ".jpeg")


@dataclass(frozen=True)
class DenseSample:
    """One image and the target files of one task (``files``: kind -> path; optional kinds may be absent)."""

    name: str
    image: Path
    files: dict[str, Path] = field(default_factory=dict)


class DenseSamples:
    """Samples as string columns (``datamodules.columns``): names, image paths and one column of paths per
    file kind (empty where a sample has no such file). Indexing gives a ``DenseSample``."""

    def __init__(self, names: StringTable, images: StringTable, files: dict[str, StringTable]):
        if any(len(column) != len(names) for column in (images, *files.values())):
            raise ValueError("DenseSamples: every column needs one entry per sample")
        self.names, self.images, self.files = names, images, files

    @classmethod
    def of(cls, samples: Sequence[DenseSample]) -> "DenseSamples":
        kinds = list(dict.fromkeys(kind for s in samples for kind in s.files))
        return cls(StringTable.of(s.name for s in samples), StringTable.of(str(s.image) for s in samples),
                   {k: StringTable.of(str(s.files.get(k, "")) for s in samples) for k in kinds})

    def __len__(self) -> int:
        return len(self.names)

    def __getitem__(self, index: int) -> DenseSample:
        index = int(index)
        if not -len(self) <= index < len(self):
            raise IndexError(f"sample {index} out of range for {len(self)}")
        paths = {kind: column[index] for kind, column in self.files.items()}
        return DenseSample(self.names[index], Path(self.images[index]),
                           {kind: Path(path) for kind, path in paths.items() if path})

    def __iter__(self) -> Iterator[DenseSample]:
        return (self[i] for i in range(len(self)))


def as_samples(samples) -> DenseSamples:
    """``DenseSamples`` as given, or the columns of a list of ``DenseSample``."""
    return samples if isinstance(samples, DenseSamples) else DenseSamples.of(list(samples))


def list_images(split_dir: Path) -> list[Path]:
    """The images of a split folder (``split_dir/images``), sorted."""
    return sorted(p for p in (split_dir / "images").iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)


def list_samples(root, split: str, spec: TargetSpec,
                 on_bad_sample: Literal["error", "skip"] = "error") -> tuple[DenseSamples, Counter]:
    """Samples of ``root/split`` with the target files of the task of ``spec``, sorted by name, plus a Counter of
    skipped reasons.

    An image without a required target file raises DataError (``on_bad_sample="error"``) or is skipped.
    """
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
        raise DataError(f"{image_dir}: no usable images for task {spec.task!r} (skipped: {dict(skipped)})")
    return DenseSamples.of(samples), skipped
