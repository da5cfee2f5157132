"""CVAT "Segmentation mask 1.1" (Pascal VOC's layout): a label map per image, one colour per label.

Layout of the unzipped export::

    labelmap.txt                           # label:color_rgb:parts:actions, then name:r,g,b:: per label
    ImageSets/Segmentation/default.txt     # the images' stems (any *.txt there: one subset each)
    SegmentationClass/STEM.png             # RGB (or palette) masks in the labelmap's colours
    JPEGImages/STEM.jpg                    # the images (exported with "Save images")

Each colour of a mask becomes a region of its label (``background``'s colour too: the class-0 area). A colour that
is in no line of ``labelmap.txt`` is reported with its pixel count and left unlabelled (255 in the output). A mask
file is decoded once while reading (its colours) and again when its image is written.
CVAT's "COCO 1.0" export (polygons and RLE masks) is read by ``coco.py``.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from datamodules.boundary.folders import inside
from datamodules.data_check import DataReport
from datamodules.errors import DataError
from sapiens2_ft.convert.budget import Tally, cost_of
from sapiens2_ft.convert.masks import ColourMask, colour_codes
from sapiens2_ft.convert.records import ConvertError, ImageRecord, Region, export_text

IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")


def is_mask_export(src: Path) -> bool:
    return (src / "labelmap.txt").is_file() and (src / "SegmentationClass").is_dir()


def read_labelmap(src: Path, path: Path) -> dict[tuple[int, int, int], str]:
    """RGB colour -> label name, from the ``name:r,g,b:parts:actions`` lines (``#`` lines are comments)."""
    colours: dict[tuple[int, int, int], str] = {}
    for number, line in enumerate(export_text(src, path).splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        name, _, rest = line.partition(":")
        rgb = rest.split(":")[0].split(",")
        try:
            colour = tuple(int(v) for v in rgb)
        except ValueError:
            colour = ()
        if not name.strip() or len(colour) != 3 or not all(0 <= v <= 255 for v in colour):
            raise ConvertError(f"{path}: line {number}: expected 'name:r,g,b::' with r, g, b in 0-255, got {line!r}")
        if colour in colours:
            raise ConvertError(f"{path}: line {number}: colour {','.join(map(str, colour))} is also "
                               f"'{colours[colour]}'s; each label needs its own colour")
        colours[colour] = name.strip()
    if not colours:
        raise ConvertError(f"{path}: no labels")
    return colours


def stems(src: Path) -> list[tuple[str, str | None]]:
    """(stem, subset) of each image the export lists (``ImageSets/Segmentation/*.txt``), else of every mask."""
    lists = sorted((src / "ImageSets" / "Segmentation").glob("*.txt"))
    if not lists:
        return [(p.stem, None) for p in sorted((src / "SegmentationClass").glob("*.png"))]
    return [(line.strip(), f.stem) for f in lists for line in export_text(src, f).splitlines() if line.strip()]


def regions_of(mask_file: Path, colours: dict, record: str, problems: DataReport) -> list[Region]:
    """One region per colour of ``colours`` present, kept as (file, colour) and decoded when painted; the
    colours ``colours`` lacks: reported, one region left unlabelled (255)."""
    codes = colour_codes(mask_file)
    present, counts = np.unique(codes, return_counts=True)
    height, width = codes.shape
    known = {(c >> 16 & 255, c >> 8 & 255, c & 255): c for c in present.tolist()}
    regions, unknown = [], []
    for (colour, code), count in zip(known.items(), counts.tolist()):
        where = f"colour {','.join(map(str, colour))}"
        if colour in colours:
            mask = ColourMask(width, height, file=mask_file, codes=(code,))
            regions.append(Region(colours[colour], where, mask=mask))
            continue
        problems.add(mask_file, record, "colour", f"{count} pixels of {where}, which labelmap.txt does not list; "
                     "they are left unlabelled (255)", fatal=False)
        unknown.append(code)
    if unknown:  # a label no class matches: painted 255
        regions.append(Region("<colours not in labelmap.txt>", "other colours",
                              mask=ColourMask(width, height, file=mask_file, codes=tuple(unknown))))
    return regions


def read(src: Path, problems: DataReport, metainfo=None, tally: Tally | None = None) -> list[ImageRecord]:
    tally = tally or Tally()
    colours = read_labelmap(src, src / "labelmap.txt")
    listed = stems(src)
    masks = [inside(src, src / "SegmentationClass" / f"{stem}.png", follow_links=True) for stem, _ in listed]
    tally.files([src / "labelmap.txt", *sorted((src / "ImageSets" / "Segmentation").glob("*.txt")),
                 *(m for m in masks if m is not None and m.is_file())])
    records = []
    for (stem, subset), mask_file in zip(listed, masks):
        record = f"image {stem}" + (f" ({subset})" if subset else "")
        if mask_file is None:  # a listed name that leads out of the export
            problems.add(src / "ImageSets", record, "name", "a name inside the export folder; the image is left out")
            continue
        image = next((p for s in IMAGE_SUFFIXES
                      if (p := inside(src, src / "JPEGImages" / f"{stem}{s}", follow_links=True)) and p.is_file()), None)
        if image is None:
            problems.add(src / "JPEGImages", record, "image", f"an image named {stem}.* (export the task with "
                         "'Save images' on); the image is left out")
            continue
        try:  # the mask's header checked against the pixel limit before decoding
            regions = regions_of(mask_file, colours, record, problems)
        except DataError as err:
            problems.add(mask_file, record, "mask", f"a readable PNG mask ({err}); the image is left out")
            continue
        size = (regions[0].mask.width, regions[0].mask.height)
        entry = ImageRecord(mask_file, image.name, image=image, size=size, record=record, regions=regions)
        tally.add(mask_file, **cost_of([entry]))  # a region per colour: each paints the whole image
        records.append(entry)
    if not records:
        raise ConvertError(f"{src}: no image of the mask export could be read (see the problems above)")
    return records
