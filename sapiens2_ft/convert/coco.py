"""COCO files of another tool (CVAT's "COCO Keypoints 1.0" and "COCO 1.0" exports): people with keypoints re-mapped
by name, and labelled regions.

Layout of the export: ``SRC/annotations/person_keypoints_<subset>.json`` or ``instances_<subset>.json`` (any
``*.json`` there, or in SRC) and the images under ``SRC/images/<subset>/``, ``SRC/images/`` or SRC. A category that
names keypoints (``keypoints``) holds people: an annotation's ``keypoints`` are x, y, v triplets in that order (v 0:
not labelled), its ``bbox`` the person box when it has a positive size (else its outline gives the box). Any other
category's annotations are label-map regions named by the category: ``segmentation`` polygons ``[[x0, y0, x1, y1,
...], ...]`` or an RLE mask (``{"counts", "size"}``, uncompressed or compressed), painted in file order.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from pycocotools import mask as mask_utils

from datamodules.boundary.files import read_json
from datamodules.boundary.folders import inside
from datamodules.boundary.images import file_size
from datamodules.data_check import DataReport
from datamodules.errors import DataError
from sapiens2_ft.convert.budget import Tally, cost_of
from sapiens2_ft.convert.masks import CocoRle
from sapiens2_ft.convert.records import ConvertError, ImageRecord, Person, Region, inside_export


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
    subset = ann_file.stem.removeprefix("person_keypoints_").removeprefix("instances_")
    categories = [c for c in data.get("categories", []) if isinstance(c, dict)]
    names = {c.get("id"): c["keypoints"] for c in categories if isinstance(c.get("keypoints"), list)}
    labels = {c.get("id"): str(c.get("name")) for c in categories}
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
        if not isinstance(ann, dict):
            continue
        record = records.get(ann.get("image_id"))
        if ann.get("category_id") not in names:
            if "keypoints" in ann:
                problems.add(ann_file, where, "category_id", f"a category with keypoint names, got "
                             f"{ann.get('category_id')!r}; the annotation is left out")
            elif record is not None and ann.get("segmentation"):  # COCO 1.0: a labelled region
                record.regions += regions(ann, labels.get(ann.get("category_id"), "?"), where, i, record, ann_file,
                                          problems)
            continue
        if ann.get("iscrowd", 0):
            continue
        if record is None:
            problems.add(ann_file, where, "image_id", f"a listed image, got {ann.get('image_id')!r}", fatal=False)
            continue
        person = _person(ann, where, names[ann["category_id"]], ann_file, problems)
        if person is not None:
            if person.box is None and ann.get("segmentation"):  # the person's outline gives the box
                person.extent += [r.points if r.points is not None else r.mask for r in
                                  regions(ann, "person", where, i, record, ann_file, problems)]
            record.people.append(person)
    return list(records.values())


def regions(ann: dict, label: str, where: str, z: int, record: ImageRecord, ann_file: Path,
            problems: DataReport) -> list[Region]:
    """The annotation's ``segmentation`` as regions of ``label``: each polygon ``[x0, y0, x1, y1, ...]``, or an RLE
    mask (``{"counts", "size": [h, w]}``, counts a list or COCO's compressed string) of the image's size."""
    segmentation = ann.get("segmentation")
    if isinstance(segmentation, list):
        out = []
        for k, polygon in enumerate(segmentation):
            if not isinstance(polygon, list) or len(polygon) < 6 or len(polygon) % 2 or \
                    not all(_number(v) for v in polygon):
                problems.add(ann_file, f"{where} polygon {k + 1}", "segmentation", "x, y pairs of finite numbers (at "
                             "least 3 vertices); the polygon is left out")
                continue
            out.append(Region(label, f"{where} polygon {k + 1}", points=np.reshape(polygon, (-1, 2)).astype(float),
                              z=z))
        return out
    if isinstance(segmentation, dict):
        size = segmentation.get("size")
        actual = file_size(record.image) if record.image is not None else None  # (w, h) from the image's header
        expected = actual or record.size  # the file's own size first: a stated one may be anything
        if expected is None or size != [expected[1], expected[0]]:
            problems.add(ann_file, where, "segmentation", f"an RLE mask of the image's size "
                         f"{'?' if expected is None else f'{expected[1]}x{expected[0]}'} (h x w), got {size}; the mask "
                         "is left out")
            return []
        try:  # kept compressed: decoded when its image is painted
            rle = {"size": size, "counts": _counts(segmentation.get("counts"), size)}
        except (TypeError, ValueError, OverflowError) as err:
            problems.add(ann_file, where, "segmentation", f"an RLE mask ({type(err).__name__}: {err}); the mask "
                         "is left out")
            return []
        return [Region(label, f"{where} mask", mask=CocoRle(size[1], size[0], rle=rle), z=z)]
    problems.add(ann_file, where, "segmentation", "polygons or an RLE mask; the region is left out")
    return []


def _counts(counts, size: list[int]) -> str:
    """An RLE's counts as COCO's compressed string: a string as it is (checked when decoded), a list of
    non-negative integers that fill the ``size`` compressed (no pixels made)."""
    if isinstance(counts, str):
        return counts
    if not isinstance(counts, list) or not all(isinstance(c, int) and c >= 0 for c in counts):
        raise TypeError("counts: a string or a list of non-negative integers")
    if sum(counts) != size[0] * size[1]:
        raise ValueError(f"counts sum to {sum(counts)}, the {size[0]}x{size[1]} mask has {size[0] * size[1]} pixels")
    return mask_utils.frPyObjects({"counts": counts, "size": size}, *size)["counts"].decode()


def read(src: Path, problems: DataReport, metainfo=None, tally: Tally | None = None) -> list[ImageRecord]:
    tally = tally or Tally()
    files = inside_export(src, annotation_files(src), problems)
    if not files:
        raise ConvertError(f"{src}: no annotations.xml and no COCO json (annotations/*.json) found")
    tally.files(files)
    records = []
    for f in files:
        found = read_file(f, src, problems)
        tally.add(f, **cost_of(found))
        records += found
    return records
