"""LabelMe: one JSON file per image (``SRC/**/*.json``).

Each file has ``shapes`` (``label``, ``points`` [[x, y], ...], ``shape_type``, ``group_id``), ``imagePath``
(relative to the JSON file), optional ``imageData`` (the image, base64) and ``imageWidth`` / ``imageHeight``.
An ``imagePath`` leading outside SRC is a problem of the file (nothing outside SRC is read). ``point`` shapes are
keypoints named by their label, ``rectangle`` a person box (two corners), ``polygon`` and
``mask`` (a base64 PNG of the box the two corner points span) label-map regions; ``group_id`` ties the shapes of
one person (see ``shapes.py``). Other shape types (circle, line, linestrip) are reported and left out.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
from pathlib import Path

import numpy as np
from tqdm import tqdm

from datamodules.boundary.files import read_json
from datamodules.boundary.folders import inside
from datamodules.boundary.images import file_size, header_size
from datamodules.boundary.limits import max_pixels
from datamodules.data_check import DataReport
from datamodules.errors import DataError
from datamodules.keypoints.metainfo import KeypointMetainfo
from sapiens2_ft.convert.budget import Tally, cost_of
from sapiens2_ft.convert.masks import PngMask
from sapiens2_ft.convert.records import ConvertError, ImageRecord, inside_export
from sapiens2_ft.convert.shapes import Shape, people_from_shapes, regions_from_shapes

MIN_POINTS = {"point": 1, "rectangle": 2, "polygon": 3, "mask": 2}
KINDS = {"point": "point", "rectangle": "box", "polygon": "polygon", "mask": "mask"}


def as_points(value) -> np.ndarray | None:
    """(N, 2) float from [[x, y], ...]; None unless every pair is two finite numbers."""
    if not isinstance(value, list) or not all(isinstance(p, (list, tuple)) and len(p) == 2 for p in value):
        return None
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for p in value for v in p):
        return None
    return np.asarray(value, float).reshape(-1, 2)


def png_mask(data: str, offset: tuple[int, int], limit: int) -> PngMask:
    """A base64 PNG mask of at most ``limit`` pixels (its image's) by its header, kept undecoded; DataError
    otherwise."""
    try:
        raw = base64.b64decode(data, validate=True)
    except (binascii.Error, ValueError, TypeError):
        raise DataError("not base64 data") from None
    size = header_size(raw)
    if size is None:
        raise DataError("not a PNG (no image header)")
    if size[0] * size[1] > limit:
        raise DataError(f"{size[0]}x{size[1]} pixels, above the limit of {limit:,}")
    return PngMask(size[0], size[1], offset, data=raw, limit=limit)


def _shape(raw, index: int, json_file: Path, problems: DataReport, limit: int) -> Shape | None:
    if not isinstance(raw, dict):
        problems.add(json_file, f"shapes[{index}]", "shape", "an object with 'label', 'points' and 'shape_type'")
        return None
    kind = raw.get("shape_type") or "polygon"  # LabelMe writes polygons without a type in old versions
    label = raw.get("label")
    where = f"shapes[{index}] ({kind} {label!r})"
    if kind not in KINDS:
        problems.add(json_file, where, "shape_type", f"'{kind}' is not converted (point, rectangle, polygon, mask "
                     "are)", fatal=False)
        return None
    if not isinstance(label, str) or not label.strip():
        problems.add(json_file, where, "label", "a non-empty label string; the shape is left out")
        return None
    points = as_points(raw.get("points"))
    if points is None or len(points) < MIN_POINTS[kind]:
        problems.add(json_file, where, "points", f"[x, y] pairs of finite numbers (at least {MIN_POINTS[kind]}), got "
                     f"{str(raw.get('points'))[:80]}; the shape is left out")
        return None
    group = None if raw.get("group_id") is None else f"group_id {raw['group_id']}"
    shape = Shape(KINDS[kind], label, where, points, group=group, z=index)
    if kind == "mask":
        try:
            shape.mask = png_mask(raw.get("mask"), (int(points[:, 0].min()), int(points[:, 1].min())), limit)
        except DataError as err:
            problems.add(json_file, where, "mask", f"a base64 PNG no larger than its image ({err}); the shape is "
                         "left out")
            return None
    return shape


def read_file(json_file: Path, src: Path, problems: DataReport, tally: Tally) -> ImageRecord | None:
    try:
        data = read_json(json_file)
    except (json.JSONDecodeError, UnicodeDecodeError, DataError) as err:
        problems.add(json_file, "-", "json", f"valid JSON within the size limit ({err}); the file is left out")
        return None
    if not isinstance(data, dict) or not isinstance(data.get("shapes"), list):
        return None  # not a LabelMe file (a file of another kind in the folder)
    image_path = data.get("imagePath")
    if not isinstance(image_path, str) or not image_path:
        problems.add(json_file, "-", "imagePath", "the image's path relative to the JSON file; the file is left out")
        return None
    name = (json_file.parent.relative_to(src) / Path(image_path.replace("\\", "/")).name).as_posix()
    record = ImageRecord(json_file, name)
    local = inside(src, json_file.parent / image_path.replace("\\", "/"), follow_links=True)
    if local is not None and local.is_file():
        record.image = local
    elif isinstance(data.get("imageData"), str):
        try:
            record.image_bytes = base64.b64decode(data["imageData"], validate=True)
        except (binascii.Error, ValueError):
            problems.add(json_file, "-", "imageData", "base64 image data; the file is left out")
            return None
    elif local is None:
        problems.add(json_file, "-", "imagePath", f"a path inside the export folder, got {image_path!r} (and no "
                     "imageData); the file is left out")
        return None
    else:
        problems.add(json_file, "-", "imagePath", f"image file not found: {local} (and no imageData)")
        return None
    width, height = data.get("imageWidth"), data.get("imageHeight")
    if isinstance(width, int) and isinstance(height, int):
        record.size = (width, height)
    size = file_size(record.image) if record.image else header_size(record.image_bytes)
    limit = size[0] * size[1] if size else max_pixels()  # a mask is no larger than its image
    shapes = [s for i, raw in enumerate(data["shapes"]) if (s := _shape(raw, i, json_file, problems, limit))]
    record.people = people_from_shapes(shapes, json_file, "-", problems)
    record.regions = regions_from_shapes(shapes)
    tally.add(json_file, **cost_of([record]))
    return record


def read(src: Path, problems: DataReport, metainfo: KeypointMetainfo, tally: Tally | None = None
         ) -> list[ImageRecord]:
    """Every LabelMe JSON file under ``src`` (other JSON files are passed over)."""
    tally = tally or Tally()
    files = inside_export(src, sorted(src.rglob("*.json")), problems)
    if not files:
        raise ConvertError(f"{src}: no LabelMe JSON files (*.json) found")
    tally.files(files)
    records = [r for f in tqdm(files, desc="reading", unit="file", disable=len(files) < 200)
               if (r := read_file(f, src, problems, tally))]
    if not records:
        raise ConvertError(f"{src}: none of the {len(files)} JSON files is a LabelMe file (no 'shapes' list)")
    return records
