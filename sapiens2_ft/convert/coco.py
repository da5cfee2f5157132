"""COCO keypoints files of another tool (CVAT's "COCO Keypoints 1.0" export): keypoints re-mapped by name.

Layout of the export: ``SRC/annotations/person_keypoints_<subset>.json`` (any ``*.json`` there, or in SRC) and
the images under ``SRC/images/<subset>/``, ``SRC/images/`` or SRC. Each category names its keypoints
(``keypoints``); an annotation's ``keypoints`` are x, y, v triplets in that order (v 0: not labelled). The
annotation's ``bbox`` is the person box when it has a positive size.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from datamodules.data_check import DataReport
from datamodules.errors import DataError
from datamodules.json_files import read_json
from datamodules.paths import inside
from sapiens2_ft.convert.records import ConvertError, ImageRecord, Person


def annotation_files(src: Path) -> list[Path]:
    files = sorted((src / "annotations").glob("*.json")) or sorted(src.glob("*.json"))
    return [f for f in files if not f.name.startswith("instances_")] or files


def _number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _person(ann: dict, where: str, names: list[str], ann_file: Path, problems: DataReport) -> Person | None:
    raw = ann.get("keypoints")
    if not isinstance(raw, list) or len(raw) != 3 * len(names) or not all(_number(v) for v in raw):
        got = f"{len(raw)} numbers" if isinstance(raw, list) else "none"
        problems.add(ann_file, where, "keypoints", f"3 finite numbers (x, y, v) per keypoint of its category "
                     f"({3 * len(names)}), got {got}; the annotation is left out")
        return None
    person = Person(where)
    for name, (x, y, v) in zip(names, np.asarray(raw, float).reshape(-1, 3)):
        if v not in (0, 1, 2):
            problems.add(ann_file, where, "keypoints", f"visibility of '{name}' in {{0, 1, 2}}, got {v}; "
                         "the keypoint is left out")
        elif v > 0:
            person.keypoints[name] = (float(x), float(y), int(v))
    bbox = ann.get("bbox")
    if isinstance(bbox, list) and len(bbox) == 4 and all(_number(v) for v in bbox) and bbox[2] > 0 and bbox[3] > 0:
        person.box = (bbox[0], bbox[1], bbox[0] + bbox[2], bbox[1] + bbox[3])
    return person


def read_file(ann_file: Path, src: Path, problems: DataReport) -> list[ImageRecord]:
    try:
        data = read_json(ann_file)
    except (json.JSONDecodeError, UnicodeDecodeError, DataError) as err:
        problems.add(ann_file, "-", "json", f"valid JSON within the size limit ({err}); the file is left out")
        return []
    if not isinstance(data, dict) or not all(isinstance(data.get(k), list) for k in ("images", "annotations")):
        problems.add(ann_file, "-", "images/annotations", "a COCO file with the lists 'images' and 'annotations'")
        return []
    subset = ann_file.stem.removeprefix("person_keypoints_")
    names = {c.get("id"): c["keypoints"] for c in data.get("categories", [])
             if isinstance(c, dict) and isinstance(c.get("keypoints"), list)}
    records: dict = {}
    for i, image in enumerate(data["images"]):
        file_name = image.get("file_name") if isinstance(image, dict) else None
        where = f"image {image.get('id')}" if isinstance(image, dict) else f"images[{i}]"
        if not isinstance(file_name, str):
            problems.add(ann_file, where, "file_name", "a string path; the image is left out")
            continue
        candidates = [c for p in (src / "images" / subset / file_name, src / "images" / file_name, src / file_name,
                                  ann_file.parent / file_name) if (c := inside(src, p, follow_links=True))]
        if not candidates:
            problems.add(ann_file, where, "file_name", "a path inside the export folder; the image is left out")
            continue
        path = next((c for c in candidates if c.is_file()), None)
        if path is None:
            problems.add(ann_file, where, "file_name", f"image file not found: {file_name} (looked in "
                         f"{', '.join(str(c.parent) for c in candidates[:3])})")
            continue
        size = (image["width"], image["height"]) if isinstance(image.get("width"), int) and \
            isinstance(image.get("height"), int) else None
        records[image.get("id")] = ImageRecord(ann_file, file_name, image=path, size=size, record=where)
    for i, ann in enumerate(data["annotations"]):
        where = f"annotation {ann.get('id')}" if isinstance(ann, dict) else f"annotations[{i}]"
        if not isinstance(ann, dict) or ann.get("iscrowd", 0):
            continue
        if ann.get("category_id") not in names:
            if "keypoints" in ann:
                problems.add(ann_file, where, "category_id", f"a category with keypoint names, got "
                             f"{ann.get('category_id')!r}; the annotation is left out")
            continue
        record = records.get(ann.get("image_id"))
        if record is None:
            problems.add(ann_file, where, "image_id", f"a listed image, got {ann.get('image_id')!r}", fatal=False)
            continue
        person = _person(ann, where, names[ann["category_id"]], ann_file, problems)
        if person is not None:
            record.people.append(person)
    return list(records.values())


def read(src: Path, problems: DataReport, metainfo=None) -> list[ImageRecord]:
    files = annotation_files(src)
    if not files:
        raise ConvertError(f"{src}: no annotations.xml and no COCO json (annotations/*.json) found")
    return [r for f in files for r in read_file(f, src, problems)]
