"""Check every sample of a dataset and list every problem at once (file, record, field, what was expected).

``check_coco`` covers a COCO keypoints json and its images; ``check_dense`` a dense split folder.
With ``decode=False`` only what is cheap is checked (json schema, files present): that is what
``setup`` runs at the start of fit; ``python -m sapiens2_ft.check_data`` also decodes every file.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from lightning.pytorch.utilities import rank_zero_warn
from tqdm import tqdm

from datamodules.coco_keypoints import KeypointOrder, clip_box
from datamodules.dense.files import list_images
from datamodules.dense.target_spec import TargetSpec
from datamodules.errors import DataError
from datamodules.boundary.images import read_image
from datamodules.boundary.files import read_json
from datamodules.boundary.folders import inside
from datamodules.keypoints.metainfo import KeypointMetainfo

BBOX_TOLERANCE = 1.0  # pixels a box may reach beyond the image border


@dataclass(frozen=True)
class Problem:
    file: str
    record: str  # "annotation 17", "image 3", "sample NAME", "-"
    field: str
    expected: str  # what is wrong and what was expected
    fatal: bool = True

    def __str__(self) -> str:
        return f"{self.file}: {self.record}: {self.field}: {self.expected}"


class DataReport:
    """Problems found, and what was checked, per split."""

    def __init__(self):
        self.problems: list[Problem] = []
        self.checked: dict[str, Counter] = {}
        self.bad_annotations: dict[str, set[int]] = {}  # annotation file -> ids with a fatal problem

    def add(self, file, record: str, field: str, expected: str, fatal: bool = True) -> None:
        self.problems.append(Problem(str(file), record, field, expected, fatal))

    def count(self, split: str, what: str, n: int = 1) -> None:
        self.checked.setdefault(split, Counter())[what] += n

    @property
    def fatal(self) -> list[Problem]:
        return [p for p in self.problems if p.fatal]

    def format(self, limit: int = 50) -> str:
        """Counts per split, then the problems grouped by field, fatal first (``limit`` lines per group)."""
        lines = [f"checked {split}: " + ", ".join(f"{n} {what}" for what, n in counts.items())
                 for split, counts in self.checked.items()]
        if not self.problems:
            return "\n".join(lines + ["no problems found"])
        lines.append(f"{len(self.problems)} problems ({len(self.fatal)} fatal):")
        groups: dict[tuple[bool, str], list[Problem]] = {}
        for problem in self.problems:
            groups.setdefault((not problem.fatal, problem.field), []).append(problem)
        for (warning, field), group in sorted(groups.items()):
            lines.append(f"  [{'warning' if warning else 'fatal'}] {field}: {len(group)}")
            lines += [f"    {p}" for p in group[:limit]]
            if len(group) > limit:
                lines.append(f"    ... {len(group) - limit} more")
        return "\n".join(lines)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _all_numbers(values: list) -> bool:
    """``_is_number`` of every value, at C speed (a keypoint list holds 51 numbers or more per annotation)."""
    return set(map(type, values)) <= {int, float} and all(map(math.isfinite, values))


def _check_images(data: dict, ann_file: Path, images_dir: Path, report: DataReport, split: str,
                  decode: bool) -> dict:
    """Image records by id (the first of duplicated ids); files present, decodable, of the stated size."""
    images: dict = {}
    records = data["images"]
    bar = tqdm(records, desc=f"{split} images", unit="img", disable=not decode or len(records) < 200)
    for i, image in enumerate(bar):
        image_id = image.get("id") if isinstance(image, dict) else None
        where = f"image {image_id}" if image_id is not None else f"images[{i}]"
        if not isinstance(image, dict) or not isinstance(image_id, int):
            report.add(ann_file, where, "id", "every image needs an integer 'id'")
            continue
        if image_id in images:
            report.add(ann_file, where, "id",
                       f"image id {image_id} is used by more than one image (ids must be unique)")
            continue
        images[image_id] = image
        name = image.get("file_name")
        if not isinstance(name, str):
            report.add(ann_file, where, "file_name", "a string path relative to the image folder")
            continue
        path = inside(images_dir, images_dir / name)
        if path is None:
            report.add(ann_file, where, "file_name", f"a path inside the image folder {images_dir}")
            continue
        if not path.is_file():
            report.add(path, where, "file_name", f"image file not found (listed in {ann_file.name})")
            continue
        report.count(split, "images")
        if decode:
            try:
                pixels = read_image(str(path))
            except DataError as err:
                report.add(path, where, "image", f"a decodable image ({str(err).split(': ', 1)[-1]})")
                continue
            height, width = pixels.shape[:2]
            stated = (image.get("width"), image.get("height"))
            if stated != (None, None) and stated != (width, height):
                said = "x".join("?" if v is None else str(v) for v in stated)
                report.add(path, where, "width/height", f"json says {said}, the file is {width}x{height}")
    return images


def _check_annotation(ann: dict, index: int, ann_file: Path, images: dict, categories: set, seen: set,
                      metainfo: KeypointMetainfo, report: DataReport, order: KeypointOrder | None = None) -> bool:
    ann_id = ann.get("id")
    where = f"annotation {ann_id}" if ann_id is not None else f"annotations[{index}]"
    add = lambda field, expected, fatal=True: report.add(ann_file, where, field, expected, fatal)  # noqa: E731
    ok = True
    if not isinstance(ann_id, int):
        add("id", "every annotation needs an integer 'id'")
        ok = False
    elif ann_id in seen:
        add("id", f"annotation id {ann_id} is used more than once (ids must be unique)")
        ok = False
    seen.add(ann_id)
    image = images.get(ann.get("image_id"))
    if image is None:
        add("image_id", f"an id listed in 'images', got {ann.get('image_id')!r}")
        ok = False
    if ann.get("category_id") not in categories:
        add("category_id", f"one of the category ids {sorted(categories)}, got {ann.get('category_id')!r}")
        ok = False
    bbox = ann.get("bbox")
    if not (isinstance(bbox, list) and len(bbox) == 4 and all(_is_number(v) for v in bbox)):
        add("bbox", f"[x, y, w, h] of 4 finite numbers, got {bbox!r}")
        ok = False
    elif bbox[2] <= 0 or bbox[3] <= 0:
        add("bbox", f"width and height > 0, got {bbox}")
        ok = False
    elif image is not None and _is_number(image.get("width")) and _is_number(image.get("height")):
        x, y, w, h = bbox
        if x < -BBOX_TOLERANCE or y < -BBOX_TOLERANCE or x + w > image["width"] + BBOX_TOLERANCE \
                or y + h > image["height"] + BBOX_TOLERANCE:
            add("bbox", f"inside the {image['width']}x{image['height']} image, got {bbox}", fatal=False)
    if ann.get("iscrowd", 0):
        return ok
    raw = ann.get("keypoints")
    listed = order.counts.get(ann.get("category_id")) if order is not None else None
    expected = 3 * (listed or metainfo.num_keypoints)
    if not isinstance(raw, list) or len(raw) != expected:
        count = f"{len(raw)} numbers" if isinstance(raw, list) else "missing"
        add("keypoints", f"{count}, expected {expected} ({listed} keypoints of its category as x, y, v)" if listed
            else f"{count}, expected {expected} ({metainfo.num_keypoints} keypoints of set '{metainfo.name}' as x, y, v)")
        return False
    if not _all_numbers(raw):
        add("keypoints", "finite numbers only")
        return False
    bad = sorted({v for v in raw[2::3] if v not in (0, 1, 2)})
    if bad:
        add("keypoints", f"visibility flags in {{0, 1, 2}}, got {bad}")
        ok = False
    return ok


def read_coco_json(ann_file: Path, report: DataReport) -> dict | None:
    """A COCO json with the lists ``images``, ``annotations`` and ``categories``; None (the problem reported)
    when it is missing, not JSON or lacks one of them."""
    try:
        data = read_json(ann_file)
    except FileNotFoundError:
        report.add(ann_file, "-", "file", "annotation file not found")
        return None
    except (json.JSONDecodeError, UnicodeDecodeError, DataError) as err:
        report.add(ann_file, "-", "json", f"valid JSON within the size limit ({err})")
        return None
    sections = ("images", "annotations", "categories")
    missing = [k for k in sections if not (isinstance(data, dict) and isinstance(data.get(k), list))]
    if missing:
        report.add(ann_file, "-", ", ".join(missing),
                   "COCO keypoints files need the lists 'images', 'annotations' and 'categories'")
        return None
    return data


def check_coco(ann_file: Path, images_dir: Path, metainfo: KeypointMetainfo, report: DataReport,
               split: str, decode: bool = True, crop: tuple[float, float] | None = None,
               data: dict | None = None) -> None:
    """Schema, ids, keypoint names (matched to the set by name), counts, visibility and boxes of a COCO keypoints
    json; its image files; with ``crop`` = (box padding, input W/H), the labelled keypoints outside their crop.
    ``data``: the json already read by ``read_coco_json``."""
    data = read_coco_json(ann_file, report) if data is None else data
    if data is None:
        return
    categories = set()
    for k, category in enumerate(data["categories"]):
        if not isinstance(category, dict):
            report.add(ann_file, f"categories[{k}]", "category", f"an object with 'id', got {category!r}")
            continue
        categories.add(category.get("id"))
    order = _keypoint_order(data["categories"], ann_file, metainfo, report)
    images = _check_images(data, ann_file, images_dir, report, split, decode)
    seen: set = set()
    outside = CropCoverage(metainfo, crop) if crop is not None else None
    for index, ann in enumerate(data["annotations"]):
        if not isinstance(ann, dict):
            report.add(ann_file, f"annotations[{index}]", "-", "an object")
            continue
        if not _check_annotation(ann, index, ann_file, images, categories, seen, metainfo, report, order):
            report.bad_annotations.setdefault(str(ann_file), set()).add(ann.get("id"))
        elif outside is not None and order is not None and not ann.get("iscrowd", 0):
            outside.add(ann, images[ann["image_id"]], order.columns.get(ann.get("category_id")))
        report.count(split, "annotations")
    if outside is not None:
        outside.report(ann_file, report)


def _keypoint_order(categories: list, ann_file: Path, metainfo: KeypointMetainfo,
                    report: DataReport) -> KeypointOrder | None:
    """The categories' keypoint names against the set (``KeypointOrder``): names that differ are a fatal problem
    naming both lists, another order a warning (training remaps it by name); None when they differ."""
    try:
        order = KeypointOrder(categories, metainfo.keypoint_names, metainfo.name, ann_file)
    except DataError as err:
        report.add(ann_file, "categories", "keypoints", str(err).split(": ", 1)[-1])
        return None
    if order.remapped:
        report.add(ann_file, f"category {', '.join(map(str, order.remapped))}", "keypoints",
                   f"{order.describe()} (when training and scoring)", fatal=False)
    return order


class CropCoverage:
    """Labelled keypoints outside their person's crop (the box clipped to the image, x ``box_padding``, widened to
    the input's W/H): training gives them weight 0. Reports how many, and the ``data.box_padding`` that keeps all."""

    CHUNK = 4096  # annotations measured at once (vectorised)

    def __init__(self, metainfo: KeypointMetainfo, crop: tuple[float, float]):
        self.metainfo, (self.padding, self.aspect) = metainfo, crop
        self.labelled = self.outside = 0
        self.needed = 0.0  # the padding that keeps every labelled keypoint
        self.example: str | None = None  # the first annotation with a keypoint outside, and its farthest one
        self.ids: list = []
        self.boxes: list[list[float]] = []
        self.points: list[np.ndarray] = []

    def add(self, ann: dict, image: dict, columns) -> None:
        box = clip_box(ann["bbox"], image)
        if box is None:
            return
        points = np.asarray(ann["keypoints"], dtype=np.float64).reshape(-1, 3)
        self.ids.append(ann.get("id"))
        self.boxes.append(box)
        self.points.append(points if columns is None else points[columns])
        if len(self.points) >= self.CHUNK:
            self.measure()

    def measure(self) -> None:
        """Count the annotations added since the last call."""
        if not self.points:
            return
        x, y, w, h = np.asarray(self.boxes, np.float64).T
        points = np.stack(self.points)
        half = np.stack([np.maximum(w, h * self.aspect), np.maximum(h, w / self.aspect)], 1)[:, None] / 2
        reach = np.abs(points[..., :2] - np.stack([x + w / 2, y + h / 2], 1)[:, None]) / half
        labelled = points[..., 2] > 0
        need = np.where(labelled, reach.max(2), 0.0)  # the padding each keypoint needs
        outside = labelled & (need > self.padding)
        self.labelled += int(labelled.sum())
        self.outside += int(outside.sum())
        self.needed = max(self.needed, float(need.max()))
        if self.example is None and outside.any():
            first = int(np.flatnonzero(outside.any(1))[0])
            k = int(np.argmax(np.where(labelled[first], need[first], -np.inf)))
            self.example = f"annotation {self.ids[first]}: '{self.metainfo.keypoint_names[k]}'"
        self.ids, self.boxes, self.points = [], [], []

    def report(self, ann_file: Path, report: DataReport) -> None:
        self.measure()
        if self.outside:
            keep = math.ceil(self.needed * 20) / 20
            report.add(ann_file, self.example, "keypoints",
                       f"{self.outside} of {self.labelled} labelled keypoints lie outside their person's crop (box x "
                       f"data.box_padding {self.padding:g}, widened to W/H {self.aspect:.3g}) and train with weight 0; "
                       f"data.box_padding {keep:g} keeps them all", fatal=False)


def check_dense(root: Path, split: str, spec: TargetSpec, num_classes: int, report: DataReport,
                decode: bool = True) -> None:
    """Every image of ``root/split`` has the targets of the task of ``spec``; with ``decode``, each file reads and
    passes its checks."""
    split_dir = Path(root) / split
    image_dir = split_dir / "images"
    if not image_dir.is_dir():
        report.add(image_dir, "-", "images", "an image folder")
        return
    images = list_images(split_dir)
    for image in tqdm(images, desc=f"{split} {spec.task}", unit="img", disable=not decode or len(images) < 200):
        where = f"sample {image.stem}"
        required, optional = spec.paths(split_dir, image.stem)
        absent = [(kind, path) for kind, path in required.items() if not path.is_file()]
        for kind, path in absent:
            report.add(path, where, kind, f"a {kind} file for image {image.name}")
        report.count(split, "images")
        if absent or not decode:
            continue
        try:
            shape = read_image(str(image)).shape[:2]
        except DataError as err:
            report.add(image, where, "image", f"a decodable image ({str(err).split(': ', 1)[-1]})")
            continue
        present = {**required, **{k: v for k, v in optional.items() if v.is_file()}}

        def attempt(kind: str, read):
            try:
                return read()
            except DataError as err:  # every file of the sample is still checked
                report.add(present.get(kind, "-"), where, kind, str(err).split(": ", 1)[-1])
                return None

        spec.load(present, shape, num_classes, attempt)


def fail_or_warn(report: DataReport, on_bad_sample: str) -> DataReport:
    """At the start of fit: fatal problems stop the run with the whole report (``error``) or are
    reported and skipped (``skip``)."""
    if report.fatal and on_bad_sample != "skip":
        raise DataError("the data check found problems (fix them, or set data.on_bad_sample: skip to train "
                        "without the bad samples):\n" + report.format())
    if report.problems:
        rank_zero_warn("the data check found problems; bad samples are skipped:\n" + report.format(limit=10))
    return report
