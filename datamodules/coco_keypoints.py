"""COCO keypoints json -> a flat list of person instances (one top-down sample each).

Problems with a record raise :class:`DataError` naming the file, the annotation id and the field,
or are counted and skipped when ``on_bad_sample="skip"``.
"""

from __future__ import annotations

import contextlib
import io
import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pycocotools.coco import COCO

from datamodules.errors import DataError
from datamodules.json_files import check_json_size, read_json
from datamodules.keypoints.metainfo import KeypointMetainfo
from datamodules.paths import inside


@dataclass(frozen=True)
class PoseInstance:
    image_path: str
    image_id: int
    annotation_id: int  # -1 for detections
    bbox: tuple[float, float, float, float]  # x, y, w, h in image pixels
    keypoints: np.ndarray  # (K, 2) float32
    visibility: np.ndarray  # (K,) float32, 0/1/2 as in COCO
    box_score: float = 1.0


def load_coco(ann_file: Path) -> COCO:
    if not ann_file.exists():
        raise DataError(f"annotation file not found: {ann_file}")
    check_json_size(ann_file)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            return COCO(str(ann_file))
    except (json.JSONDecodeError, KeyError, TypeError) as err:
        raise DataError(f"{ann_file}: not a COCO annotation file ({type(err).__name__}: {err})") from err


def _check_image(coco: COCO, image_id: int, images_dir: Path, ann_file: Path, what: str) -> Path:
    if image_id not in coco.imgs:
        raise DataError(f"{ann_file}: {what}: image_id {image_id} is not in 'images'")
    path = inside(images_dir, images_dir / str(coco.imgs[image_id]["file_name"]))
    if path is None:
        raise DataError(f"{ann_file}: {what} (image_id {image_id}): field 'file_name' leads outside the image folder "
                        f"{images_dir}")
    if not path.exists():
        raise DataError(f"{ann_file}: {what} (image_id {image_id}): image file not found: {path}")
    return path


def clip_box(bbox, image: dict) -> list[float] | None:
    """An annotation box [x, y, w, h] clipped to the image as upstream loads it: both corners into
    [0, width - 1] x [0, height - 1] (so a full-image box loses one pixel); None when nothing is left.
    Left as it is when the image record has no ``width`` / ``height``."""
    width, height = image.get("width"), image.get("height")
    if not all(isinstance(v, (int, float)) and v > 0 for v in (width, height)):
        return list(bbox)
    x, y, w, h = (float(v) for v in bbox)
    x1, x2 = np.clip([x, x + w], 0, width - 1)
    y1, y2 = np.clip([y, y + h], 0, height - 1)
    if x2 <= x1 or y2 <= y1:
        return None
    return [float(x1), float(y1), float(x2 - x1), float(y2 - y1)]


def load_instances(
    ann_file: Path,
    images_dir: Path,
    metainfo: KeypointMetainfo,
    min_keypoints: int = 1,
    on_bad_sample: str = "error",
    exclude_ids: set | frozenset = frozenset(),
) -> tuple[list[PoseInstance], Counter]:
    """Non-crowd person instances with at least ``min_keypoints`` labelled keypoints, and skip counts.

    Boxes are clipped to the image (:func:`clip_box`); a box wholly outside it is skipped and counted.

    ``exclude_ids``: annotation ids the data check found unusable, skipped as bad records.
    """
    coco = load_coco(ann_file)
    skipped: Counter = Counter()
    instances: list[PoseInstance] = []
    num_k = metainfo.num_keypoints
    for ann in coco.dataset.get("annotations", []):
        ann_id = ann.get("id")
        what = f"annotation id {ann_id}"
        if ann_id in exclude_ids:
            skipped["bad record"] += 1
            continue
        try:
            if ann.get("iscrowd", 0):
                skipped["crowd"] += 1
                continue
            raw = ann.get("keypoints")
            if not isinstance(raw, list) or len(raw) != 3 * num_k:
                count = len(raw) / 3 if isinstance(raw, list) else "no"
                raise DataError(
                    f"{ann_file}: {what}: field 'keypoints' holds {count} keypoints, "
                    f"the keypoint set '{metainfo.name}' has {num_k} ({num_k * 3} numbers x,y,v)"
                )
            bbox = ann.get("bbox")
            if not isinstance(bbox, list) or len(bbox) != 4 or bbox[2] <= 0 or bbox[3] <= 0:
                raise DataError(f"{ann_file}: {what}: field 'bbox' must be [x, y, w, h] with w, h > 0, got {bbox}")
            kpts = np.asarray(raw, dtype=np.float32).reshape(num_k, 3)
            if (kpts[:, 2] > 0).sum() < min_keypoints:
                skipped["too few keypoints"] += 1
                continue
            path = _check_image(coco, ann["image_id"], images_dir, ann_file, what)
            bbox = clip_box(bbox, coco.imgs[ann["image_id"]])
            if bbox is None:
                skipped["box outside the image"] += 1
                continue
        except DataError:
            if on_bad_sample != "skip":
                raise
            skipped["bad record"] += 1
            continue
        instances.append(PoseInstance(str(path), int(ann["image_id"]), int(ann_id), tuple(float(v) for v in bbox),
                                      kpts[:, :2].copy(), kpts[:, 2].copy()))
    return instances, skipped


def load_detections(det_file: Path, ann_file: Path, images_dir: Path, metainfo: KeypointMetainfo,
                    score_threshold: float = 0.0) -> tuple[list[PoseInstance], Counter]:
    """Person boxes from a COCO results json (``image_id``, ``bbox``, ``score``, ``category_id``)."""
    coco = load_coco(ann_file)
    if not det_file.exists():
        raise DataError(f"detections file not found: {det_file}")
    dets = read_json(det_file)
    if not isinstance(dets, list):
        raise DataError(f"{det_file}: expected a list of COCO detection results")
    skipped: Counter = Counter()
    empty = np.zeros((metainfo.num_keypoints, 2), np.float32)
    instances = []
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
        path = _check_image(coco, det.get("image_id"), images_dir, det_file, what)
        instances.append(PoseInstance(str(path), int(det["image_id"]), -1, tuple(float(v) for v in bbox),
                                      empty, np.zeros(len(empty), np.float32), float(det.get("score", 1.0))))
    return instances, skipped


def map_keypoints(instances: list[PoseInstance], source: KeypointMetainfo,
                  target: KeypointMetainfo) -> tuple[list[PoseInstance], list[str], list[str]]:
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
    mapped = [PoseInstance(i.image_path, i.image_id, i.annotation_id, i.bbox,
                           np.where(present[:, None], i.keypoints[take], 0).astype(np.float32),
                           np.where(present, i.visibility[take], 0).astype(np.float32), i.box_score)
              for i in instances]
    unused = [n for n in source.keypoint_names if n not in target.keypoint_names]
    missing = [n for n, c in zip(target.keypoint_names, columns) if c < 0]
    return mapped, unused, missing
