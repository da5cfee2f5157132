"""What one export may ask of convert, counted before the work it costs.

A mask costs its box's pixels to decode and paint, however short its encoding: a 30 kB CVAT XML can declare
hundreds of full-image masks of a 100-megapixel image (tens of GB of pixels). Each reader counts what its
files declare (CVAT: a first pass over the XML before any image is looked at; COCO and Label Studio: over
each loaded file; LabelMe and the mask export: file by file) into a ``Tally``, which stops the conversion with a
``ConvertError`` naming the budget, and how to raise it, as soon as one is over. Nothing is decoded while
reading: masks are decoded one image at a time when the data set is written (``masks.py``).
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass, fields
from pathlib import Path

from sapiens2_ft.convert.masks import Mask
from sapiens2_ft.convert.records import ConvertError, ImageRecord

MASK_PIXELS_PER_BYTE = 100_000  # an RLE of a real outline costs ~10-1000 pixels a byte; 30 kB of masks ~1e6
MIN_MASK_PIXELS = 10**9  # ten 100-megapixel masks, whatever the size of the files


@dataclass(frozen=True)
class Budget:
    """The most one export may declare (``--budget KEY=N,...``).

    Args:
        bytes: Bytes of its annotation files together (XML, JSON, label files, mask PNGs).
        shapes: Shapes together: points, boxes, polygons, masks, YOLO rows.
        points: Coordinates together: keypoints and polygon vertices.
        masks: Masks together (CVAT and LabelMe masks, COCO RLEs, the colours of a mask export's files).
        mask_pixels: Pixels all masks declare together (the box of each). Default: 100,000 per byte of the
            annotation files, at least 1,000,000,000.
    """

    bytes: int = 32 << 30
    shapes: int = 20_000_000
    points: int = 200_000_000
    masks: int = 1_000_000
    mask_pixels: int | None = None

    @classmethod
    def parse(cls, items: list[str] | str | None) -> Budget:
        """``["masks=N,mask_pixels=N", "shapes=N"]`` -> a Budget (numbers as ``1e10`` too); ``ConvertError``
        naming what is wrong."""
        items = [items] if isinstance(items, str) else items or []
        keys, values = [f.name for f in fields(cls)], {}
        for item in (part.strip() for text in items for part in text.split(",") if part.strip()):
            key, sep, value = item.partition("=")
            try:
                number = int(float(value))
            except (ValueError, OverflowError):
                number = 0
            if not sep or key.strip() not in keys or number <= 0:
                raise ConvertError(f"--budget {item!r}: expected KEY=N with N a positive number and KEY one of "
                                   f"{', '.join(keys)}")
            values[key.strip()] = number
        return cls(**values)


WHAT = {"bytes": "bytes of annotation files", "shapes": "shapes", "points": "points and vertices",
        "masks": "masks", "mask_pixels": "mask pixels (each mask costs its box to decode, however short its "
                                           "encoding)"}


class Tally:
    """What the export has declared so far against its ``Budget``."""

    def __init__(self, budget: Budget | None = None):
        self.budget = budget or Budget()
        self.totals: Counter = Counter()

    def limit(self, key: str) -> int:
        value = getattr(self.budget, key)
        if key == "mask_pixels" and value is None:
            return max(MIN_MASK_PIXELS, MASK_PIXELS_PER_BYTE * self.totals["bytes"])
        return value

    def files(self, paths: list[Path]) -> None:
        """Count the bytes of annotation files before they are read."""
        self.add(str(paths[0].parent) if paths else "-", bytes=sum(os.stat(p).st_size for p in paths))

    def add(self, where: str | Path, **cost: int) -> None:
        """Add ``cost`` (keys of ``Budget``) declared by ``where``; ``ConvertError`` when a total is over its
        budget."""
        self.totals.update({k: int(v) for k, v in cost.items()})
        for key in WHAT:
            if self.totals[key] > self.limit(key):
                raise ConvertError(self.message(key, where))

    def message(self, key: str, where) -> str:
        default = key == "mask_pixels" and self.budget.mask_pixels is None
        how = (f" ({MASK_PIXELS_PER_BYTE:,} per byte of its {self.totals['bytes']:,} bytes of annotations, at least "
               f"{MIN_MASK_PIXELS:,})" if default else "")
        return (f"{where}: the export declares {self.totals[key]:,} {WHAT[key]} so far, above its budget of "
                f"{self.limit(key):,}{how}; nothing was decoded or written. For an export you trust, raise it with "
                f"--budget {key}=N (Python: convert(..., budget=Budget({key}=N)))")


def cost_of(records: list[ImageRecord]) -> dict[str, int]:
    """What ``records`` ask of the writer: shapes, points, and the masks it will decode with their pixels (a mask
    that is both a region and a person's outline is decoded, and counted, twice)."""
    cost: Counter = Counter()
    for record in records:
        for person in record.people:
            cost["shapes"] += len(person.keypoints) + (person.box is not None)
            cost["points"] += len(person.keypoints) + 2 * (person.box is not None)
        outlines = [e for person in record.people for e in person.extent]
        for item in outlines + [r.mask if r.mask is not None else r.points for r in record.regions]:
            if isinstance(item, Mask):
                cost["masks"] += 1
                cost["mask_pixels"] += item.pixels
            else:
                cost["points"] += len(item)
        cost["shapes"] += len(record.regions)
    return dict(cost)
