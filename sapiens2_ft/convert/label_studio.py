"""Label Studio: its JSON export (``SRC/*.json``: a list of tasks) and the images under SRC.

A task has ``data`` (the image URL, e.g. ``/data/upload/1/3f2a9c1d-photo.jpg``; found under SRC by file name,
with or without the upload prefix) and ``annotations`` (the first one not cancelled is used) whose ``result``
regions carry ``type``, ``value``, ``original_width`` / ``original_height`` and an ``id``. Coordinates are
percent of the image size: ``keypointlabels`` (``x``, ``y``), ``rectanglelabels`` (``x``, ``y``, ``width``,
``height``, ``rotation`` in degrees about the top-left corner) and ``polygonlabels`` (``points``). Regions
linked by a ``relation`` result or a ``parentID`` are one person. Other region types (brushes, ellipses) are
reported and left out.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

import numpy as np

from datamodules.data_check import DataReport
from datamodules.dense.files import IMAGE_SUFFIXES
from datamodules.errors import DataError
from datamodules.boundary.files import read_json
from datamodules.boundary.folders import inside
from sapiens2_ft.convert.budget import Tally, cost_of
from sapiens2_ft.convert.labelme import as_points
from sapiens2_ft.convert.records import ConvertError, ImageRecord, inside_export
from sapiens2_ft.convert.shapes import Shape, at, people_from_shapes, regions_from_shapes

KINDS = {"keypointlabels": "point", "rectanglelabels": "box", "polygonlabels": "polygon"}
UPLOAD_PREFIX = re.compile(r"^[0-9a-f]{8}-")


def image_url(data: dict) -> str | None:
    """The task's image: ``data.image``, else the first value that looks like an image path."""
    values = [data.get("image")] + list(data.values())
    return next((v for v in values if isinstance(v, str) and Path(urlparse(v).path).suffix.lower()
                 in IMAGE_SUFFIXES + (".bmp", ".webp", ".tif", ".tiff")
                 or isinstance(v, str) and "?d=" in v), None)


def file_name(url: str) -> str:
    """The file name an image URL refers to (local-files ``?d=path`` included)."""
    parsed = urlparse(url)
    local = parse_qs(parsed.query).get("d")
    return Path(unquote(local[0] if local else parsed.path)).name


def _groups(results: list) -> dict[str, str]:
    """Region id -> the id of its person's first region, over relations and parentIDs."""
    parent: dict[str, str] = {}

    def root(a: str) -> str:
        while parent.get(a, a) != a:
            a = parent[a]
        return a

    def join(a, b) -> None:
        if isinstance(a, str) and isinstance(b, str):
            parent.setdefault(a, a), parent.setdefault(b, b)
            parent[root(b)] = root(a)

    for r in results:
        if isinstance(r, dict):
            if r.get("type") == "relation":
                join(r.get("from_id"), r.get("to_id"))
            elif r.get("parentID"):
                join(r.get("parentID"), r.get("id"))
    return {a: root(a) for a in parent}


def _value_points(kind: str, value: dict, size) -> np.ndarray | None:
    """Fractions of the image size: a point, a box's two opposite extent corners (rotated in pixels, which needs
    the ``size``), or polygon vertices."""
    if kind == "polygon":
        points = as_points(value.get("points"))
        return None if points is None else points / 100
    keys = ("x", "y") if kind == "point" else ("x", "y", "width", "height")
    if not all(isinstance(value.get(k), (int, float)) and math.isfinite(value[k]) for k in keys):
        return None
    if kind == "point":
        return np.array([[value["x"], value["y"]]]) / 100
    x, y, w, h = (value[k] / 100 for k in keys)
    rotation = value.get("rotation") or 0
    if not isinstance(rotation, (int, float)) or not math.isfinite(rotation):
        return None
    angle = math.radians(rotation)
    if not angle:
        return np.array([[x, y], [x + w, y + h]])
    if size is None:
        return None
    scale = np.array(size, float)
    corners = np.array([[0, 0], [w, 0], [w, h], [0, h]]) * scale
    rot = np.array([[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]])
    corners = (corners @ rot.T) / scale + [x, y]
    return np.stack([corners.min(0), corners.max(0)])


def _task(task, index: int, json_file: Path, files: dict, problems: DataReport) -> ImageRecord | None:
    record = f"task {task.get('id', index)}" if isinstance(task, dict) else f"tasks[{index}]"
    if not isinstance(task, dict) or not isinstance(task.get("data"), dict):
        problems.add(json_file, record, "data", "a task object with 'data'; the task is left out")
        return None
    url = image_url(task["data"])
    if url is None:
        problems.add(json_file, record, "data", "an image URL in the task's data; the task is left out")
        return None
    name = file_name(url)
    path = files.get(name) or files.get(UPLOAD_PREFIX.sub("", name))
    if path is None:
        problems.add(json_file, record, "data", f"image file not found under the export folder: {name}")
        return None
    annotations = [a for a in task.get("annotations") or task.get("completions") or []
                   if isinstance(a, dict) and not a.get("was_cancelled")]
    if len(annotations) > 1:
        problems.add(json_file, record, "annotations", f"{len(annotations)} annotations; the first "
                     f"(id {annotations[0].get('id')}) is used", fatal=False)
    results = annotations[0].get("result") or [] if annotations else []
    groups, shapes, size = _groups(results), [], None
    for k, result in enumerate(results):
        if not isinstance(result, dict) or result.get("type") == "relation":
            continue
        kind, value = KINDS.get(result.get("type")), result.get("value")
        labels = value.get(result.get("type")) if isinstance(value, dict) else None
        where = f"result {result.get('id', k)} ({result.get('type')} {labels})"
        if kind is None:
            problems.add(json_file, at(record, where), "type", f"region type '{result.get('type')}' is not converted",
                         fatal=False)
            continue
        if isinstance(result.get("original_width"), int) and isinstance(result.get("original_height"), int):
            size = (result["original_width"], result["original_height"])
        points = _value_points(kind, value, size) if isinstance(value, dict) else None
        if not labels or not isinstance(labels[0], str) or points is None:
            problems.add(json_file, at(record, where), "value", "a label and finite percent coordinates (a rotated "
                         "box also original_width / original_height); the region is left out")
            continue
        group = groups.get(result.get("id"))
        shapes.append(Shape(kind, labels[0], where, points, group=None if group is None else f"region {group}", z=k))
    image = ImageRecord(json_file, path.name, image=path, size=size, record=record, normalised=True)
    image.people = people_from_shapes(shapes, json_file, record, problems)
    image.regions = regions_from_shapes(shapes)
    return image


def read(src: Path, problems: DataReport, metainfo=None, tally: Tally | None = None) -> list[ImageRecord]:
    """The tasks of every Label Studio JSON export in ``src`` (top level)."""
    tally = tally or Tally()
    exports = inside_export(src, sorted(src.glob("*.json")), problems)
    if not exports:
        raise ConvertError(f"{src}: no Label Studio JSON export (*.json) found")
    tally.files(exports)
    files = {p.name: p for p in sorted(src.rglob("*")) if p.suffix.lower() in IMAGE_SUFFIXES + (".bmp", ".webp")
             and inside(src, p, follow_links=True)}  # a link leading out of the export is no image of it
    records = []
    for json_file in exports:
        try:
            tasks = read_json(json_file)
        except (json.JSONDecodeError, UnicodeDecodeError, DataError) as err:
            problems.add(json_file, "-", "json", f"valid JSON within the size limit ({err}); the file is left out")
            continue
        if not isinstance(tasks, list):
            problems.add(json_file, "-", "tasks", "a list of tasks (Label Studio's 'JSON' export)")
            continue
        found = [r for i, t in enumerate(tasks) if (r := _task(t, i, json_file, files, problems))]
        tally.add(json_file, **cost_of(found))
        records += found
    return records
