"""Where pose's person boxes come from: a boxes file, a person detector, a seg model's foreground, or the whole
image. Each source maps a chunk of images to one (N, 5) ``[x, y, w, h, score]`` array per image."""

from __future__ import annotations

import argparse
import math
from collections import defaultdict
from pathlib import Path, PurePosixPath
from typing import Protocol

import numpy as np
import torch

from datamodules.boundary.files import read_json
from datamodules.errors import BadInput
from sapiens2_ft.models.detector import DEFAULT_DETECTOR, DetectorError, PersonDetector
from sapiens2_ft.predict.loading import load_inference
from sapiens2_ft.tasks.seg.boxes import boxes_from_foreground


BOX_CHOICES = ("Pose needs the people's boxes; the other sources: --boxes FILE (a COCO json or a list of detections), "
               "--boxes_from_seg SEG_MODEL (a Sapiens2 seg model), --whole_image (each image is one person)")
MAX_COORDINATE = 1e6  # pixels: a box value beyond it is a mistake (an image of the pixel limit is 10,000 wide)


class BoxSource(Protocol):
    def __call__(self, keys: list[str], images: list[np.ndarray]) -> list[np.ndarray]:
        """One (N, 5) float64 array of person boxes per image."""


def whole_image(keys: list[str], images: list[np.ndarray]) -> list[np.ndarray]:
    """One person filling each image."""
    return [np.array([[0.0, 0.0, image.shape[1], image.shape[0], 1.0]]) for image in images]


class FileBoxes:
    """The boxes a ``--boxes`` file lists for each image key (see ``read_boxes``)."""

    def __init__(self, boxes: dict[str, list]):
        self.boxes = boxes

    def __call__(self, keys: list[str], images: list[np.ndarray]) -> list[np.ndarray]:
        return [np.asarray(self.boxes.get(key, []), dtype=np.float64).reshape(-1, 5) for key in keys]


class DetectorBoxes:
    """A person detector run on the whole chunk at once."""

    def __init__(self, detector: PersonDetector):
        self.detector = detector

    def __call__(self, keys: list[str], images: list[np.ndarray]) -> list[np.ndarray]:
        return self.detector(images)


class PeopleBoxes:
    """One box per connected region of the people a model finds (``TaskInference.people``: a seg model's classes but
    background, a matting model's alpha >= 0.5), scored by the region's mean probability. With ``split_heads``,
    a region holding several heads (``TaskInference.people_heads``: a seg model's head classes) is split between
    them."""

    def __init__(self, inference, min_area: float, pad: float, split_heads: bool = True, head_area: float = 0.002):
        self.inference, self.min_area, self.pad = inference, min_area, pad
        self.split_heads, self.head_area = split_heads, head_area

    @torch.no_grad()
    def __call__(self, keys: list[str], images: list[np.ndarray]) -> list[np.ndarray]:
        return self.from_outputs(self.inference.image_outputs(images))

    def from_outputs(self, image_outputs: list[dict]) -> list[np.ndarray]:
        """The boxes of this model's outputs (``image_outputs``) when they are already computed."""
        boxes = []
        for outputs in image_outputs:
            foreground, probability = self.inference.people(outputs)
            heads = self.inference.people_heads(outputs) if self.split_heads else None
            boxes.append(boxes_from_foreground(foreground.numpy(), self.min_area, self.pad, probability.numpy(),
                                               None if heads is None else heads.numpy(), self.head_area))
        return boxes


def is_person(entry: dict) -> bool:
    """A box of category 1 (person), or of no category."""
    return entry.get("category_id", 1) == 1


def match_file_names(keys: list[str], file_names, source: Path) -> dict[str, str]:
    """Image key -> the ``--boxes`` file name it refers to: the same relative path, else the same bare name
    when exactly one unmatched image and one unmatched file name have it."""
    file_names = {PurePosixPath(f).as_posix() for f in file_names}
    matched = {key: key for key in keys if key in file_names}
    images, files = defaultdict(list), defaultdict(list)
    for key in keys:
        if key not in matched:
            images[PurePosixPath(key).name].append(key)
    for name in sorted(file_names - set(matched)):
        files[PurePosixPath(name).name].append(name)
    for name, candidates in images.items():
        if (len(candidates) > 1 and files.get(name)) or len(files.get(name, [])) > 1:
            raise BadInput(f"--boxes {source}: '{name}' is ambiguous: images {candidates[:5]} under --input, "
                           f"file names {files[name][:5]} in the boxes file; give file_name relative to --input")
        if files.get(name):
            matched[candidates[0]] = files[name][0]
    return matched


def box_problem(bbox, score=1.0) -> str | None:
    """Why ``bbox`` ``[x, y, w, h]`` and ``score`` are no person box, or None: the box is four finite numbers of
    positive width and height within ``MAX_COORDINATE`` pixels, the score a finite number. One rule for a
    ``--boxes`` file's entries and the Python API's box arrays."""
    if not (isinstance(bbox, list) and len(bbox) == 4 and all(_finite(v) for v in bbox)):
        return f"'bbox' must be [x, y, w, h] of finite numbers, got {str(bbox)[:80]}"
    if bbox[2] <= 0 or bbox[3] <= 0 or max(abs(v) for v in bbox) > MAX_COORDINATE:
        return f"'bbox' [x, y, w, h] needs w, h > 0 and values within +-{MAX_COORDINATE:g} pixels, got {bbox}"
    if not _finite(score):
        return f"'score' must be a finite number, got {score!r}"
    return None


def box_row(entry: dict, where: str, source: Path) -> list[float]:
    """``[x, y, w, h, score]`` of a boxes-file entry; BadInput naming the file and the entry when it is no person
    box (``box_problem``)."""
    bbox, score = entry.get("bbox"), entry.get("score", 1.0)
    problem = box_problem(bbox, score)
    if problem:
        raise BadInput(f"--boxes {source}: {where}: {problem}")
    return [*map(float, bbox), float(score)]


def box_arrays(boxes: list, first: int = 0) -> list[np.ndarray]:
    """Box arrays given for images ``first``, ``first + 1``, ... (rows ``[x, y, w, h]`` or ``[x, y, w, h, score]``)
    as (N, 5) float64; BadInput naming the image and row of a bad one (``box_problem``)."""
    out = []
    for k, given in enumerate(boxes):
        b = np.asarray(given, dtype=np.float64)
        b = b.reshape(0, 5) if b.size == 0 else b.reshape(1, -1) if b.ndim == 1 else b
        if b.ndim != 2 or b.shape[1] not in (4, 5):
            raise BadInput(f"boxes of image {first + k}: expected [x, y, w, h] or [x, y, w, h, score] rows, "
                           f"got shape {b.shape}")
        for r, row in enumerate(b):
            problem = box_problem(row[:4].tolist(), float(row[4]) if len(row) == 5 else 1.0)
            if problem:
                raise BadInput(f"boxes of image {first + k}, row {r}: {problem}")
        out.append(b if b.shape[1] == 5 else np.concatenate([b, np.ones((len(b), 1))], axis=1))
    return out


def _finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def read_boxes(path: Path | None, keys: list[str]) -> tuple[dict[str, int], dict[str, list]]:
    """Image ids and person boxes ``[x, y, w, h, score]`` by image key (see ``match_file_names``); every entry is
    checked (``box_row``) before anything runs."""
    ids = {key: i + 1 for i, key in enumerate(keys)}
    if path is None:
        return ids, {}
    try:
        data = read_json(path)
    except (OSError, ValueError) as err:  # missing, not JSON (NaN is, as Python reads it), above the size limit
        raise BadInput(f"--boxes {path}: cannot read it as JSON ({err})") from None
    by_file: dict[str, list] = {}
    if isinstance(data, dict) and "images" in data:
        images = [im for im in data["images"] if isinstance(im, dict)]
        if len(images) != len(data["images"]) or not all(isinstance(im.get("file_name"), str) for im in images):
            raise BadInput(f"--boxes {path}: every entry of 'images' needs an 'id' and a 'file_name'")
        names = {im.get("id"): PurePosixPath(im["file_name"]).as_posix() for im in images}
        for k, ann in enumerate(data.get("annotations", [])):
            where = f"annotation {ann.get('id', k) if isinstance(ann, dict) else k}"
            if not isinstance(ann, dict) or ann.get("image_id") not in names:
                got = ann.get("image_id") if isinstance(ann, dict) else ann
                raise BadInput(f"--boxes {path}: {where}: image_id {got!r} is not an id of 'images'")
            if not ann.get("iscrowd", 0) and is_person(ann):
                by_file.setdefault(names[ann["image_id"]], []).append(box_row(ann, where, path))
        matched = match_file_names(keys, names.values(), path)
        missing = [key for key in keys if key not in matched]
        if missing:
            raise BadInput(f"--boxes {path}: no image entry for {missing[:5]}")
        file_ids = {name: i for i, name in names.items()}
        ids = {key: file_ids[name] for key, name in matched.items()}
    elif isinstance(data, list):
        for k, det in enumerate(data):
            if not isinstance(det, dict) or not isinstance(det.get("file_name"), str) or "bbox" not in det:
                raise BadInput(f"--boxes {path}: entry {k} needs 'file_name' and 'bbox' ([x, y, w, h])")
            if is_person(det):
                by_file.setdefault(PurePosixPath(det["file_name"]).as_posix(), []).append(
                    box_row(det, f"entry {k}", path))
        matched = match_file_names(keys, [det["file_name"] for det in data], path)
    else:
        raise BadInput(f"--boxes {path}: expected a COCO json with 'images' or a list of detections")
    return ids, {key: by_file.get(name, []) for key, name in matched.items()}


def add_box_arguments(parser: argparse.ArgumentParser) -> None:
    """The person-box options shared by ``predict`` and ``detect``."""
    parser.add_argument("--detector", nargs="?", const=DEFAULT_DETECTOR, default=None,
                        help=f"pose: person boxes from a transformers object-detection model (hub id or directory; "
                             f"the flag alone: {DEFAULT_DETECTOR})")
    parser.add_argument("--det_threshold", type=float, default=0.5, help="detector: minimum person score")
    parser.add_argument("--nms_iou", type=float, default=0.6, help="detector: IoU above which boxes are suppressed")
    parser.add_argument("--boxes_from_seg", default=None,
                        help="pose: person boxes from the people a Sapiens2 seg (or matting) model finds (same "
                             "forms as --model)")
    parser.add_argument("--seg_min_area", type=float, default=0.001,
                        help="--boxes_from_seg: drop regions under this fraction of the image")
    parser.add_argument("--seg_box_pad", type=float, default=0.05,
                        help="--boxes_from_seg: grow each box by this fraction of its size on every side")
    parser.add_argument("--seg_split_heads", action=argparse.BooleanOptionalAction, default=True,
                        help="--boxes_from_seg: split a region holding several heads (a seg model's head "
                             "classes) between them, so that people who touch get a box each")
    parser.add_argument("--seg_head_area", type=float, default=0.002,
                        help="--seg_split_heads: the smallest head that counts, as a fraction of the image")


def box_argument_problems(args) -> list[str]:
    """The problems of the box arguments' values (``add_box_arguments``), each naming its argument."""
    fractions = [("det_threshold", "the minimum person score"), ("nms_iou", "the IoU above which boxes are suppressed"),
                 ("seg_min_area", "a fraction of the image"), ("seg_head_area", "a fraction of the image")]
    problems = [f"--{name}: {what} is between 0 and 1, got {getattr(args, name)}" for name, what in fractions
                if not 0 <= getattr(args, name) <= 1]
    if args.seg_box_pad < 0:
        problems.append(f"--seg_box_pad: a box grows by a fraction >= 0 of its size, got {args.seg_box_pad}")
    return problems


def box_source(args, out: Path, loaded: dict | None = None):
    """The BoxSource the box arguments ask for, or None when none is given. ``loaded``: inference objects already
    loaded, by the name given (a ``--boxes_from_seg`` that is also a ``--model`` is loaded once)."""
    if args.detector and args.boxes_from_seg:
        raise BadInput("give one of --detector and --boxes_from_seg")
    if args.detector:
        try:
            return DetectorBoxes(PersonDetector(args.detector, args.det_threshold, args.nms_iou, args.device))
        except DetectorError as err:
            which = (f"the person detector {args.detector} (pose's box source when none is given)"
                     if getattr(args, "detector_by_default", False) else f"--detector {args.detector}")
            raise err.with_message(f"{which}: {err}\n{BOX_CHOICES}") from None
    if args.boxes_from_seg:
        if args.boxes_from_seg in (loaded or {}):
            inference, task = loaded[args.boxes_from_seg]
        else:
            inference, task = load_inference(args.boxes_from_seg, out / "seg_model", device=args.device)
        if not inference.finds_people:
            raise BadInput(f"--boxes_from_seg: {args.boxes_from_seg} is a {task} model, which does not find "
                           f"people; give a segmentation (or matting) model")
        return PeopleBoxes(inference, args.seg_min_area, args.seg_box_pad, args.seg_split_heads, args.seg_head_area)
    return None
