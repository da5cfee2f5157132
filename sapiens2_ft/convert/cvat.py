"""CVAT: "CVAT for images 1.1" XML (``SRC/annotations.xml`` + ``SRC/images/``), its "Segmentation mask 1.1"
export (``labelmap.txt`` + colour masks: ``cvat_masks.py``), or its "COCO 1.0" / "COCO Keypoints 1.0" exports
(a COCO json: ``coco.py``).

Each ``<image name width height>`` holds shapes with a ``label`` attribute: ``<points points="x,y">`` (a
keypoint named by its label; ``occluded="1"``: visibility 1), ``<box xtl ytl xbr ybr>`` (a person box),
``<polygon points="x0,y0;x1,y1;...">`` and ``<mask rle left top width height>`` (label-map regions, painted in
``z_order``), and ``<skeleton>`` (one person; its ``<points>`` children are its keypoints, ``outside="1"``: not
labelled). A ``group_id`` attribute ties shapes to one person (a skeleton with its box). Polylines, ellipses and
cuboids are reported and left out; tags are passed over.
"""

from __future__ import annotations

import io
import math
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

import numpy as np

from datamodules.boundary.files import read_bytes
from datamodules.boundary.folders import inside
from datamodules.boundary.images import file_size
from datamodules.boundary.limits import max_pixels
from datamodules.data_check import DataReport
from datamodules.errors import DataError
from sapiens2_ft.convert import coco, cvat_masks
from sapiens2_ft.convert.budget import Tally
from sapiens2_ft.convert.masks import RunLengths, run_lengths
from sapiens2_ft.convert.records import ConvertError, ImageRecord, inside_export
from sapiens2_ft.convert.shapes import Shape, at, people_from_shapes, regions_from_shapes

SKIPPED = ("polyline", "ellipse", "cuboid")
SHAPES = ("box", "points", "polygon", "mask")


def parse_points(text: str | None) -> np.ndarray | None:
    """``"x0,y0;x1,y1"`` -> (N, 2); None when malformed."""
    try:
        points = np.array([[float(v) for v in pair.split(",")] for pair in (text or "").split(";") if pair.strip()])
    except ValueError:
        return None
    if points.ndim != 2 or points.shape[1] != 2 or not len(points) or not np.isfinite(points).all():
        return None
    return points


def _float_attrs(element, names) -> list[float] | None:
    try:
        values = [float(element.get(n)) for n in names]
    except (TypeError, ValueError):
        return None
    return values if all(math.isfinite(v) for v in values) else None


def mask_fits(width: float, height: float, size: tuple[int, int] | None) -> bool:
    """A mask box of ``width`` x ``height`` inside its image's ``size`` (None: within the pixel limit)."""
    return width * height <= max_pixels() if size is None else width <= size[0] and height <= size[1]


def _shape(element, where: str, group, xml_file: Path, record: str, problems: DataReport,
           size: tuple[int, int] | None = None) -> Shape | None:
    """One shape; a mask larger than ``size`` (its image's width and height; None: the pixel limit) is refused
    before its pixels are made."""
    tag, label = element.tag, element.get("label")
    z = int(element.get("z_order", "0")) if element.get("z_order", "0").lstrip("-").isdigit() else 0
    bad = lambda field, expected: problems.add(xml_file, at(record, where), field,  # noqa: E731
                                               f"{expected}; the shape is left out")
    if not label:
        bad("label", "a label attribute")
        return None
    if tag == "box":
        corners = _float_attrs(element, ("xtl", "ytl", "xbr", "ybr"))
        if corners is None:
            bad("xtl/ytl/xbr/ybr", "finite numbers")
            return None
        return Shape("box", label, where, np.reshape(corners, (2, 2)), group=group, z=z)
    if tag == "mask":
        box = _float_attrs(element, ("left", "top", "width", "height"))
        if box is None:
            bad("left/top/width/height", "integers")
            return None
        x0, y0, width, height = (int(v) for v in box)
        if width < 1 or height < 1:
            bad("width/height", f"a positive mask size, got {box[2]:g}x{box[3]:g}")
            return None
        if not mask_fits(width, height, size):
            image = f"{size[0]}x{size[1]}" if size else "the pixel limit"
            bad("width/height", f"a mask no larger than its image ({image}), got {box[2]:g}x{box[3]:g}")
            return None
        try:  # kept as run lengths: decoded when its image is painted
            mask = RunLengths(width, height, (x0, y0), run_lengths(element.get("rle") or "", width, height))
        except ValueError as err:
            bad("rle", f"run lengths over the mask's box ({err})")
            return None
        return Shape("mask", label, where, np.array([[x0, y0], [x0 + width - 1, y0 + height - 1]]), group=group,
                     mask=mask, z=z)
    points = parse_points(element.get("points"))
    if points is None:
        bad("points", f"'x0,y0;x1,y1;...' with finite numbers, got {str(element.get('points'))[:60]!r}")
        return None
    if tag == "polygon":
        if len(points) < 3:
            bad("points", "at least 3 vertices")
            return None
        return Shape("polygon", label, where, points, group=group, z=z)
    if len(points) != 1:
        bad("points", f"one point per keypoint label (got {len(points)}): use one <points> per keypoint or a skeleton")
        return None
    visibility = 1 if element.get("occluded") == "1" else 2
    return Shape("point", label, where, points, group=group, visibility=visibility)


def _image(element, index: int, xml_file: Path, src: Path, problems: DataReport) -> ImageRecord | None:
    name = element.get("name")
    record = f"image {element.get('id', index)} ({name})"
    if not name:
        problems.add(xml_file, record, "name", "the image's path; the image is left out")
        return None
    candidates = [c for p in (src / "images" / name, src / name) if (c := inside(src, p, follow_links=True))]
    if not candidates:
        problems.add(xml_file, record, "name", "a path inside the export folder; the image is left out")
        return None
    path = next((p for p in candidates if p.is_file()), None)
    if path is None:
        problems.add(xml_file, record, "name", f"image file not found: {candidates[0]}")
        return None
    try:
        size = (int(element.get("width")), int(element.get("height")))
    except (TypeError, ValueError):
        size = None
    shapes, counts, size_on_disk = [], {}, file_size(path)
    for child in element:
        counts[child.tag] = counts.get(child.tag, 0) + 1
        where = f"<{child.tag}> {counts[child.tag]} ({child.get('label')!r})"
        group = None if child.get("group_id") is None else f"group_id {child.get('group_id')}"
        if child.tag in SKIPPED:
            problems.add(xml_file, at(record, where), "shape", f"{child.tag} shapes are not converted", fatal=False)
        elif child.tag == "skeleton":
            key = group if group is not None else f"skeleton {counts[child.tag]}"
            for k, joint in enumerate(child.findall("points")):
                if joint.get("outside") != "1":
                    shape = _shape(joint, f"{where} <points> {k + 1} ({joint.get('label')!r})", key, xml_file,
                                   record, problems, size_on_disk)
                    shapes += [shape] if shape else []
        elif child.tag in ("box", "points", "polygon", "mask"):
            shape = _shape(child, where, group, xml_file, record, problems, size_on_disk)
            shapes += [shape] if shape else []
    image = ImageRecord(xml_file, name, image=path, size=size, record=record, split=None)
    image.people = people_from_shapes(shapes, xml_file, record, problems)
    image.regions = regions_from_shapes(shapes)
    return image


def xml_cost(data: bytes, xml_file: Path) -> Counter:
    """What an XML export declares (shapes, points, masks and their pixels), counted in one pass that keeps no
    image's elements, before anything is looked at."""
    cost: Counter = Counter()
    try:
        for _, element in ET.iterparse(io.BytesIO(data)):
            if element.tag in SHAPES:
                cost["shapes"] += 1
                cost["points"] += 2 if element.tag == "box" else (element.get("points") or "").count(";") + 1
            if element.tag == "mask":
                size = _float_attrs(element, ("width", "height")) or (0, 0)
                cost["masks"] += 1
                cost["mask_pixels"] += int(max(0.0, size[0]) * max(0.0, size[1]))
            if element.tag in ("image", "track"):
                element.clear()
    except ET.ParseError as err:
        raise ConvertError(f"{xml_file}: not valid XML ({err})") from None
    return cost


def _xml_root(xml_file: Path, tally: Tally):
    """The XML's root, once its bytes (within the annotation file limit) and what it declares are in budget."""
    try:
        data = read_bytes(xml_file, kind="annotation")
    except DataError as err:
        raise ConvertError(str(err)) from None
    except OSError as err:
        raise ConvertError(f"{xml_file}: cannot be read ({err.strerror})") from None
    if b"<!DOCTYPE" in data or b"<!ENTITY" in data:
        raise ConvertError(f"{xml_file}: declares a document type or entities, which CVAT never writes and which "
                           "can expand without end; it is not read")
    tally.add(xml_file, **xml_cost(data, xml_file))
    return ET.fromstring(data)


def read(src: Path, problems: DataReport, metainfo=None, tally: Tally | None = None) -> list[ImageRecord]:
    """``SRC/annotations.xml`` (or the ``*.xml`` files in SRC); without one, the mask or the COCO export."""
    tally = tally or Tally()
    xml_files = [src / "annotations.xml"] if (src / "annotations.xml").is_file() else sorted(src.glob("*.xml"))
    xml_files = inside_export(src, xml_files, problems)
    if not xml_files and cvat_masks.is_mask_export(src):
        return cvat_masks.read(src, problems, tally=tally)
    if not xml_files:
        return coco.read(src, problems, tally=tally)
    tally.files(xml_files)
    records = []
    for xml_file in xml_files:
        root = _xml_root(xml_file, tally)
        if root.tag != "annotations":
            raise ConvertError(f"{xml_file}: not a CVAT export (root <{root.tag}>, expected <annotations>)")
        if root.find("track") is not None:
            problems.add(xml_file, "-", "<track>", "video tracks are not converted: export as 'CVAT for images'",
                         fatal=False)
        records += [r for i, e in enumerate(root.iter("image")) if (r := _image(e, i, xml_file, src, problems))]
    return records
