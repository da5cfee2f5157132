"""What every format reader produces: one ``ImageRecord`` per image, with its people and its label regions.

Coordinates are image pixels, or fractions of the image size when ``ImageRecord.normalised`` (YOLO, Label
Studio): the writer scales them once it has read the image. Keypoints keep the tool's names; the writer maps
them onto the keypoint set.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from datamodules.boundary.files import read_text
from datamodules.boundary.folders import inside
from datamodules.data_check import DataReport
from datamodules.errors import BadInput, DataError
from sapiens2_ft.convert.masks import Mask


class ConvertError(BadInput):
    """The export cannot be converted at all (wrong folder, no annotations, a flag that does not fit)."""


@dataclass
class Person:
    """One person: keypoints by the tool's name -> (x, y, visibility 1 or 2), an optional box (x1, y1, x2, y2),
    and the polygon points that extend the box when the tool gives none."""

    where: str  # the record in the annotation file: "group 2", "skeleton 1", "row 3"
    keypoints: dict[str, tuple[float, float, int]] = field(default_factory=dict)
    box: tuple[float, float, float, float] | None = None
    extent: list[np.ndarray | Mask] = field(default_factory=list)  # (N, 2) point sets, masks


@dataclass
class Region:
    """A labelled area of the label map: a polygon (``points`` (N, 2)) or a ``mask`` (decoded when painted).
    Regions are painted in ``z`` order, then in file order."""

    label: str
    where: str
    points: np.ndarray | None = None
    mask: Mask | None = None
    z: int = 0


@dataclass
class ImageRecord:
    """One annotated image of the export."""

    ann_file: Path  # the file that describes the image (named in every problem)
    name: str  # the image's path as the tool lists it (relative, '/'-separated)
    image: Path | None = None  # the image file (None when only ``image_bytes`` are given)
    image_bytes: bytes | None = None  # LabelMe's embedded imageData
    size: tuple[int, int] | None = None  # (width, height) as the tool states it, checked against the file
    people: list[Person] = field(default_factory=list)
    regions: list[Region] = field(default_factory=list)
    split: str | None = None  # the tool's own split (YOLO's data.yaml keys)
    normalised: bool = False
    record: str = "-"  # how the annotation file names this image ("image 3", "task 7")


def inside_export(src: Path, files: list[Path], problems: DataReport) -> list[Path]:
    """The annotation files found in ``src`` that lie inside it, symbolic links resolved; the others are problems
    (an export from someone else may hold a link named ``annotations.xml`` to a file of yours)."""
    kept = [f for f in files if inside(src, f, follow_links=True)]
    for f in files:
        if f not in kept:
            problems.add(f, "-", "file", "a file inside the export folder (it is a link leading out); not read")
    return kept


def export_file(src: Path, path: Path) -> Path:
    """``path``, a file the export cannot do without, when it lies inside ``src`` (links resolved); else a
    ``ConvertError`` (nothing outside an export is read)."""
    if inside(src, path, follow_links=True) is None:
        raise ConvertError(f"{path}: a symbolic link leading outside the export folder; not read")
    return path


def export_text(src: Path, path: Path) -> str:
    """A text file the export cannot do without (a label map, a list): inside ``src``, a regular file within the
    text limit, read through the boundary; ``ConvertError`` naming it otherwise."""
    try:
        return read_text(export_file(src, path))
    except DataError as err:
        raise ConvertError(str(err)) from None
    except OSError as err:
        raise ConvertError(f"{path}: cannot be read ({err.strerror})") from None
