"""COCO keypoints json -> person instances (one top-down sample each) as columns (``PoseInstances``).

Problems with a record raise :class:`DataError` naming the file, the annotation id and the field,
or are counted and skipped when ``on_bad_sample="skip"``.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Sequence

import numpy as np
from lightning.pytorch.utilities import rank_zero_info

from datamodules.columns import StringTable
from datamodules.errors import DataError
from datamodules.boundary.files import read_json
from datamodules.keypoints.metainfo import KeypointMetainfo, normalise_name
from datamodules.boundary.folders import inside
from datamodules.pose_instances import PoseInstance, PoseInstances  # noqa: F401 (PoseInstance: re-exported)


def read_coco(ann_file: Path) -> dict:
    """A COCO json as a dict with the lists ``images``, ``annotations`` and ``categories``, else a DataError."""
    if not ann_file.exists():
        raise DataError(f"annotation file not found: {ann_file}")
    try:
        data = read_json(ann_file)
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise DataError(f"{ann_file}: not a COCO annotation file ({type(err).__name__}: {err})") from err
    if not isinstance(data, dict) or not all(isinstance(data.get(k, []), list)
                                             for k in ("images", "annotations", "categories")):
        raise DataError(f"{ann_file}: not a COCO annotation file (no lists 'images', 'annotations', 'categories')")
    return data


class ImageFiles:
    """The image records of a COCO dict by id, each file looked up once (not once per annotation)."""

    def __init__(self, data: dict, images_dir: Path, ann_file: Path):
        self.records = {image.get("id"): image for image in data.get("images", []) if isinstance(image, dict)}
        self.images_dir, self.ann_file = images_dir, ann_file
        self.paths: dict = {}  # image id -> its path; "": the file is missing; None: the path leads outside

    def path(self, image_id, what: str) -> str:
        """The file of ``image_id``; a DataError naming ``what`` when the id or the file is missing."""
        if image_id not in self.records:
            raise DataError(f"{self.ann_file}: {what}: image_id {image_id} is not in 'images'")
        if image_id not in self.paths:
            path = inside(self.images_dir, self.images_dir / str(self.records[image_id].get("file_name")))
            self.paths[image_id] = path if path is None else str(path) if path.is_file() else ""
        if self.paths[image_id] is None:
            raise DataError(f"{self.ann_file}: {what} (image_id {image_id}): field 'file_name' leads outside the "
                            f"image folder {self.images_dir}")
        if not self.paths[image_id]:
            raise DataError(f"{self.ann_file}: {what} (image_id {image_id}): image file not found: "
                            f"{self.images_dir / str(self.records[image_id].get('file_name'))}")
        return self.paths[image_id]


class InstanceColumns:
    """Instances appended one by one, then turned into ``PoseInstances`` (no Python object per instance kept)."""

    def __init__(self, num_keypoints: int):
        self.num_keypoints = num_keypoints
        self.paths: dict[str, int] = {}
        self.rows: list[tuple] = []
        self.points: list[np.ndarray] = []

    def add(self, path: str, image_id: int, annotation_id: int, bbox, points: np.ndarray,
            box_score: float = 1.0) -> None:
        """``points``: (K, 3) float32 x, y, visibility."""
        self.rows.append((self.paths.setdefault(path, len(self.paths)), image_id, annotation_id, *bbox, box_score))
        self.points.append(points)

    def build(self) -> PoseInstances:
        rows = np.asarray(self.rows, np.float64).reshape(-1, 8)
        points = np.stack(self.points) if self.points else np.zeros((0, self.num_keypoints, 3), np.float32)
        ids = [np.asarray([r[i] for r in self.rows], np.int64) for i in range(3)]
        return PoseInstances(StringTable.of(self.paths), *ids, rows[:, 3:7], points[:, :, :2], points[:, :, 2],
                             rows[:, 7])


class KeypointOrder:
    """How a json's categories order their keypoints against a keypoint set, matched by name (``normalise_name``).

    ``columns[category_id]``: the json column of each of the set's keypoints; absent where the json lists the set's
    names in the set's order (or lists no names: read in the set's order). A category whose names hold the set's
    in another order, or more names than the set's, is remapped (``remapped`` names it; ``unused``: its other
    names); a set name the json lacks raises a :class:`DataError` with both lists."""

    def __init__(self, categories, names: Sequence[str], set_name: str, ann_file):
        self.columns: dict = {}
        self.remapped: list = []
        self.unnamed: list = []
        self.unused: list = []  # the json's names beyond the set's, left out
        self.counts: dict = {}  # category id -> its keypoint count, where remapped
        self.names, self.set_name = list(names), set_name
        wanted = [normalise_name(n) for n in names]
        for category in categories if isinstance(categories, list) else []:
            if not isinstance(category, dict):
                continue
            listed = category.get("keypoints")
            if not isinstance(listed, list) or not listed:
                self.unnamed.append(category.get("id"))
                continue
            given = [normalise_name(n) for n in listed]
            if given == wanted:
                continue
            if not set(wanted) <= set(given) or len(set(given)) != len(given):
                raise DataError(name_mismatch(ann_file, category.get("id"), listed, self.names, set_name))
            self.columns[category.get("id")] = np.asarray([given.index(n) for n in wanted])
            self.counts[category.get("id")] = len(listed)
            self.remapped.append(category.get("id"))
            self.unused += [n for n, key in zip(listed, given) if key not in wanted]

    def apply(self, data: dict) -> None:
        """Rewrite a loaded COCO dict in place into the set's order: remapped categories' names and their
        annotations' keypoint triplets (what a ground truth scored by set order needs)."""
        for category in data.get("categories", []):
            if isinstance(category, dict) and category.get("id") in self.columns:
                category["keypoints"] = list(self.names)
                category["skeleton"] = []
        for ann in data.get("annotations", []):
            category = ann.get("category_id") if isinstance(ann, dict) else None
            raw = ann.get("keypoints") if category in self.columns else None
            if isinstance(raw, list) and len(raw) == 3 * self.counts[category]:
                triplets = np.asarray(raw, dtype=np.float64).reshape(-1, 3)[self.columns[category]]
                ann["keypoints"] = triplets.ravel().tolist()
                ann["num_keypoints"] = int((triplets[:, 2] > 0).sum())

    def describe(self) -> str | None:
        """What was remapped, in a line (None: nothing)."""
        if not self.remapped:
            return None
        unused = f"; its other keypoints are not used: {self.unused}" if self.unused else ""
        return (f"category {', '.join(map(str, self.remapped))} lists the keypoints of set '{self.set_name}' in "
                f"another order{' among others' if self.unused else ''}: taken by name{unused}")


def name_mismatch(ann_file, category_id, names: list, set_names: Sequence[str], set_name: str) -> str:
    """The error for a category whose keypoint names are not the set's: both lists, and what differs."""
    wanted = {normalise_name(n): n for n in set_names}
    given = {normalise_name(n): n for n in names}
    extra = [given[n] for n in given if n not in wanted]
    missing = [wanted[n] for n in wanted if n not in given]
    repeated = sorted({str(n) for n in names if [normalise_name(m) for m in names].count(normalise_name(n)) > 1})
    why = [f"names the set lacks: {extra}"] if extra else []
    why += [f"names of the set it lacks: {missing}"] if missing else []
    why += [f"repeated names: {repeated}"] if repeated else []
    return (f"{ann_file}: category {category_id}: its keypoint names are not those of the keypoint set "
            f"'{set_name}' ({'; '.join(why)}).\n  json ({len(names)}): {list(names)}\n  set  "
            f"({len(set_names)}): {list(set_names)}\nGive data.keypoints the set the json "
            f"is labelled with (a built-in name or a YAML file, docs/pose.md#keypoint-sets), or fix its names")


def clip_box(bbox, image: dict) -> list[float] | None:
    """An annotation box [x, y, w, h] clipped to the image as upstream loads it: both corners into
    [0, width - 1] x [0, height - 1] (so a full-image box loses one pixel); None when nothing is left.
    Left as it is when the image record has no ``width`` / ``height``."""
    width, height = image.get("width"), image.get("height")
    if not all(isinstance(v, (int, float)) and v > 0 for v in (width, height)):
        return list(bbox)
    x, y, w, h = (float(v) for v in bbox)
    right, bottom = float(width - 1), float(height - 1)
    x1, x2 = (min(max(v, 0.0), right) for v in (x, x + w))
    y1, y2 = (min(max(v, 0.0), bottom) for v in (y, y + h))
    if x2 <= x1 or y2 <= y1:
        return None
    return [x1, y1, x2 - x1, y2 - y1]


def load_instances(
    ann_file: Path,
    images_dir: Path,
    metainfo: KeypointMetainfo,
    min_keypoints: int = 1,
    on_bad_sample: str = "error",
    exclude_ids: set | frozenset = frozenset(),
    data: dict | None = None,
) -> tuple[PoseInstances, Counter]:
    """Non-crowd person instances with at least ``min_keypoints`` labelled keypoints, and skip counts.

    Boxes are clipped to the image (:func:`clip_box`); a box wholly outside it is skipped and counted.
    Each image file is looked up once. ``data``: the json already read (``read_coco``).

    ``exclude_ids``: annotation ids the data check found unusable, skipped as bad records.
    """
    data = read_coco(ann_file) if data is None else data
    order = KeypointOrder(data.get("categories"), metainfo.keypoint_names, metainfo.name, ann_file)
    if order.remapped:
        rank_zero_info(f"{ann_file}: {order.describe()}")
    images = ImageFiles(data, images_dir, ann_file)
    skipped: Counter = Counter()
    columns = InstanceColumns(metainfo.num_keypoints)
    num_k = metainfo.num_keypoints
    for ann in data.get("annotations", []):
        ann_id = ann.get("id") if isinstance(ann, dict) else None
        what = f"annotation id {ann_id}"
        if ann_id in exclude_ids:
            skipped["bad record"] += 1
            continue
        try:
            if not isinstance(ann, dict):
                raise DataError(f"{ann_file}: annotation {ann!r}: not an object")
            if ann.get("iscrowd", 0):
                skipped["crowd"] += 1
                continue
            raw = ann.get("keypoints")
            listed = order.counts.get(ann.get("category_id"), num_k)
            if not isinstance(raw, list) or len(raw) != 3 * listed:
                count = len(raw) / 3 if isinstance(raw, list) else "no"
                raise DataError(
                    f"{ann_file}: {what}: field 'keypoints' holds {count} keypoints, its category lists {listed} "
                    f"({listed * 3} numbers x,y,v)" if listed != num_k else f"{ann_file}: {what}: field 'keypoints' "
                    f"holds {count} keypoints, the keypoint set '{metainfo.name}' has {num_k} ({num_k * 3} numbers x,y,v)"
                )
            bbox = ann.get("bbox")
            if not isinstance(bbox, list) or len(bbox) != 4 or bbox[2] <= 0 or bbox[3] <= 0:
                raise DataError(f"{ann_file}: {what}: field 'bbox' must be [x, y, w, h] with w, h > 0, got {bbox}")
            kpts = np.asarray(raw, dtype=np.float32).reshape(listed, 3)
            if ann.get("category_id") in order.columns:
                kpts = kpts[order.columns[ann["category_id"]]]
            if (kpts[:, 2] > 0).sum() < min_keypoints:
                skipped["too few keypoints"] += 1
                continue
            path = images.path(ann.get("image_id"), what)
            bbox = clip_box(bbox, images.records[ann["image_id"]])
            if bbox is None:
                skipped["box outside the image"] += 1
                continue
        except DataError:
            if on_bad_sample != "skip":
                raise
            skipped["bad record"] += 1
            continue
        columns.add(path, int(ann["image_id"]), int(ann_id), [float(v) for v in bbox], kpts)
    return columns.build(), skipped


def load_detections(det_file: Path, ann_file: Path, images_dir: Path, metainfo: KeypointMetainfo,
                    score_threshold: float = 0.0) -> tuple[PoseInstances, Counter]:
    """Person boxes from a COCO results json (``image_id``, ``bbox``, ``score``, ``category_id``)."""
    images = ImageFiles(read_coco(ann_file), images_dir, det_file)
    if not det_file.exists():
        raise DataError(f"detections file not found: {det_file}")
    dets = read_json(det_file)
    if not isinstance(dets, list):
        raise DataError(f"{det_file}: expected a list of COCO detection results")
    skipped: Counter = Counter()
    empty = np.zeros((metainfo.num_keypoints, 3), np.float32)
    columns = InstanceColumns(metainfo.num_keypoints)
    for i, det in enumerate(dets):
        what = f"detection #{i}"
        if det.get("category_id", 1) != 1:
            skipped["not a person"] += 1
            continue
        if det.get("score", 1.0) < score_threshold:
            skipped["below score threshold"] += 1
            continue
        bbox = det.get("bbox")
        if not isinstance(bbox, list) or len(bbox) != 4 or bbox[2] <= 0 or bbox[3] <= 0:
            raise DataError(f"{det_file}: {what}: field 'bbox' must be [x, y, w, h] with w, h > 0, got {bbox}")
        path = images.path(det.get("image_id"), what)
        columns.add(path, int(det["image_id"]), -1, [float(v) for v in bbox], empty, float(det.get("score", 1.0)))
    return columns.build(), skipped


def map_keypoints(instances: PoseInstances, source: KeypointMetainfo,
                  target: KeypointMetainfo) -> tuple[PoseInstances, list[str], list[str]]:
    """Instances labelled with keypoint set ``source`` re-indexed by name onto ``target``: a target keypoint the
    source lacks gets visibility 0 (weight 0 in training). Returns the instances and the source names left out
    and the target names missing."""
    if source.keypoint_names == target.keypoint_names:
        return instances, [], []
    columns = [source.keypoint_names.index(n) if n in source.keypoint_names else -1 for n in target.keypoint_names]
    present = np.asarray([c >= 0 for c in columns])
    if not present.any():
        raise DataError(f"keypoint sets '{source.name}' and '{target.name}' share no keypoint names")
    take = np.asarray([max(c, 0) for c in columns])
    mapped = instances.with_keypoints(np.where(present[None, :, None], instances.keypoints[:, take], 0),
                                      np.where(present[None], instances.visibility[:, take], 0))
    unused = [n for n in source.keypoint_names if n not in target.keypoint_names]
    missing = [n for n, c in zip(target.keypoint_names, columns) if c < 0]
    return mapped, unused, missing
