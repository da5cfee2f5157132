"""Writing the converted data set in the layouts the data modules read by default, then checking it.

    DIR/annotations/{split}.json      COCO keypoints (pose; ``file_name`` relative to DIR/{split}/images)
    DIR/{split}/images/NAME.jpg|png   the images (copied; other formats re-encoded as PNG)
    DIR/{split}/labels/NAME.png       uint8 class ids, 255 = ignore (seg; when the export has polygons or masks)
    DIR/classes.txt                   the class set, one name per line (seg)

Images in sub-folders of the export are flattened (``a/b.jpg`` -> ``a__b.jpg``); a repeated stem gets ``_1``,
``_2``, ... Nothing that exists is overwritten unless asked, and nothing is written through a symbolic link: every
file is written by ``datamodules.boundary.writes`` (a new file renamed over its name), and a link on the way to an
output file stops the conversion before anything is written. Masks are decoded one at a time, as each image's
label map is painted.
"""

from __future__ import annotations

import os
import random
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

import cv2
import numpy as np
from tqdm import tqdm

from datamodules.boundary.files import read_text
from datamodules.boundary.folders import link_on_the_way
from datamodules.boundary.images import decode, read_image
from datamodules.boundary.writes import copy_file, write_bytes, write_image, write_json, write_text
from datamodules.data_check import DataReport, check_coco, check_dense
from datamodules.dense.files import IMAGE_SUFFIXES
from datamodules.errors import DataError
from datamodules.keypoints.metainfo import KeypointMetainfo
from sapiens2_ft.convert.masks import Mask, foreground_corners
from sapiens2_ft.convert.names import CLASS_SET_BYTES, NameMap
from sapiens2_ft.convert.records import ConvertError, ImageRecord, Person
from sapiens2_ft.convert.shapes import at, paint_region
from sapiens2_ft.tasks.seg.targets import IGNORE_INDEX
from sapiens2_ft.tasks.seg.targets import TARGETS as SEG


@dataclass
class ConvertResult:
    out: Path
    splits: dict[str, Counter]  # split -> images / people / label maps written
    keypoints: NameMap
    classes: NameMap
    problems: DataReport  # of the export: every bad record, named
    check: DataReport  # of the written data set (the data modules' own checks)
    pose: bool = False
    seg: bool = False
    people: int = 0
    images_without_regions: int = 0
    skipped_images: list[str] = field(default_factory=list)


def output_names(records: list[ImageRecord]) -> list[str]:
    """A flat, unique file name per record (stems unique too: the dense layout matches files by stem)."""
    names, stems = [], set()
    for record in records:
        parts = [p for p in PurePosixPath(record.name.replace("\\", "/")).parts if p not in ("/", ".", "..")]
        flat = PurePosixPath("__".join(parts) or "image")
        suffix = flat.suffix if flat.suffix.lower() in IMAGE_SUFFIXES else ".png"
        stem, k = flat.stem, 0
        while (stem if not k else f"{stem}_{k}").lower() in stems:
            k += 1
        stem = stem if not k else f"{stem}_{k}"
        stems.add(stem.lower())
        names.append(stem + suffix)
    return names


def assign_splits(records: list[ImageRecord], names: list[str], split: str | None, val_fraction: float,
                  seed: int) -> list[str]:
    """``split`` for every image (default: the tool's own split, else ``train``); with ``val_fraction``, a
    seeded shuffle of the sorted names sends that fraction (at least one image) to ``val``, the rest to train."""
    if not val_fraction:
        return [split or record.split or "train" for record in records]
    if not 0 < val_fraction < 1:
        raise ConvertError(f"--val_fraction {val_fraction}: expected a fraction between 0 and 1")
    if len(records) < 2:
        raise ConvertError(f"--val_fraction needs at least 2 images, the export has {len(records)}")
    order = sorted(range(len(records)), key=lambda i: names[i])
    random.Random(seed).shuffle(order)
    n_val = min(len(records) - 1, max(1, round(val_fraction * len(records))))
    val = set(order[:n_val])
    return ["val" if i in val else (split or "train") for i in range(len(records))]


def _box(person: Person, points: list, scale, width: int, height: int) -> list[float] | None:
    """[x, y, w, h]: the tool's box, else the extent of the keypoints and polygons; clipped to the image and at
    least one pixel wide and high."""
    if person.box is not None:
        x1, y1, x2, y2 = np.asarray(person.box, float) * np.tile(scale, 2)
    else:
        extent = [np.asarray(points, float).reshape(-1, 2)] + [
            foreground_corners(e) if isinstance(e, Mask) else np.asarray(e, float) * scale for e in person.extent]
        extent = np.concatenate(extent)
        if not len(extent):
            return None
        (x1, y1), (x2, y2) = extent.min(0), extent.max(0)
    corners = []
    for a, b, size in ((x1, x2, width), (y1, y2, height)):
        a, b = float(np.clip(a, 0, size)), float(np.clip(b, 0, size))
        if b - a < 1:
            a = float(np.clip((a + b - 1) / 2, 0, size - 1))
            b = a + 1
        corners.append((a, b))
    (x1, x2), (y1, y2) = corners
    return [x1, y1, x2 - x1, y2 - y1]


def person_annotation(person: Person, keypoints: NameMap, scale, width: int, height: int) -> dict | None:
    """The COCO annotation of ``person`` (keypoints in the set's order), or None when it has neither a keypoint of
    the set nor a box."""
    flat = [0.0] * (3 * len(keypoints.targets))
    points = []
    for name, (x, y, v) in person.keypoints.items():
        k = keypoints(name)
        if k is None:
            continue
        x, y = float(x * scale[0]), float(y * scale[1])
        flat[3 * k:3 * k + 3] = [x, y, float(v)]
        points.append((x, y))
    if not points and person.box is None:
        return None
    bbox = _box(person, points, scale, width, height)
    if bbox is None:
        return None
    return {"category_id": 1, "keypoints": flat, "num_keypoints": len(points), "bbox": bbox,
            "area": bbox[2] * bbox[3], "iscrowd": 0}


def label_map(record: ImageRecord, classes: NameMap, scale, width: int, height: int, background: int,
              problems: DataReport) -> np.ndarray:
    """uint8 class ids: ``background`` where no region is, regions painted in z order (unmatched labels: 255); a
    mask that does not decode is a problem, its region left out."""
    labels = np.full((height, width), background if record.regions else IGNORE_INDEX, np.uint8)
    for region in sorted(record.regions, key=lambda r: r.z):
        index = classes(region.label)
        try:
            paint_region(labels, region, IGNORE_INDEX if index is None else index, scale)
        except DataError as err:
            problems.add(record.ann_file, at(record.record, region.where), "mask", f"a mask that decodes ({err}); "
                         "the region is left out")
    return labels


def _read(record: ImageRecord, problems: DataReport) -> np.ndarray | None:
    try:
        if record.image is not None:
            return read_image(str(record.image))
        return cv2.cvtColor(decode(record.image_bytes, cv2.IMREAD_COLOR, "of the embedded data"), cv2.COLOR_BGR2RGB)
    except DataError as err:
        where = record.image or record.ann_file
        problems.add(where, record.record, "image", f"a readable image for '{record.name}' ({err}); the image is "
                     "left out")
        return None


def _write_image(record: ImageRecord, pixels: np.ndarray, out: Path, name: str) -> None:
    """The image at ``out / name``: the file copied (or the embedded bytes) when its format is kept, else PNG."""
    source_suffix = (record.image.suffix if record.image is not None else PurePosixPath(record.name).suffix).lower()
    if source_suffix == Path(name).suffix.lower() and record.image is not None:
        copy_file(record.image, out, name)
    elif source_suffix == Path(name).suffix.lower() and record.image_bytes is not None:
        write_bytes(out, name, record.image_bytes)
    else:
        write_image(out, name, cv2.cvtColor(pixels, cv2.COLOR_RGB2BGR))


def _check_outputs(out: Path, outputs: list[str], overwrite: bool) -> None:
    """Before anything is written: no symbolic link on the way to an output file (it would lead the writes
    elsewhere), and none of them exists unless ``overwrite``."""
    links = [link for name in outputs if (link := link_on_the_way(out, name)) is not None]
    if links:
        raise ConvertError(f"{links[0]} is a symbolic link ({len(set(links))} on the way to the output files); "
                           "convert writes nothing through a link: remove it, or choose another --out")
    existing = [out / name for name in outputs if name != "classes.txt" and os.path.lexists(out / name)]
    if existing and not overwrite:
        raise ConvertError(f"{len(existing)} output files exist already (e.g. {existing[0]}); choose another --out "
                           "or pass --overwrite to replace them")


def _same_classes(classes_file: Path, text: str) -> bool:
    """Whether the class set file in the output, if any, lists these classes."""
    if not os.path.lexists(classes_file):
        return True
    try:
        return read_text(classes_file, CLASS_SET_BYTES, "class set") == text
    except (OSError, DataError) as err:
        raise ConvertError(f"{classes_file}: cannot be read ({err}); convert into another --out") from None


@dataclass(frozen=True)
class LabelSets:
    """The sets a data set is written in and how the tool's names map onto them."""

    metainfo: KeypointMetainfo  # the keypoint set (pose)
    keypoints: NameMap  # the tool's keypoint names -> the set's
    classes: NameMap  # the tool's labels -> the class set (seg; index 0 the background)


@dataclass(frozen=True)
class Layout:
    """Where the images go and what unlabelled pixels are (``python -m sapiens2_ft.convert``'s options).

    Args:
        split: The split every image goes to (None: train).
        val_fraction: This fraction of the images (seeded, at least one) goes to val instead.
        seed: Seed of the ``val_fraction`` draw.
        unlabelled: Seg pixels no polygon or mask covers: ``background`` (class 0) or ``ignore`` (255).
        overwrite: Replace output files that exist.
    """

    split: str | None = None
    val_fraction: float = 0.0
    seed: int = 0
    unlabelled: str = "background"
    overwrite: bool = False


def write_dataset(records: list[ImageRecord], out: Path, labels: LabelSets, problems: DataReport,
                  layout: Layout = Layout()) -> ConvertResult:
    """Write every record (images, COCO json per split, label maps), then run the data modules' checks on it."""
    out = Path(out)
    metainfo, keypoints, classes = labels.metainfo, labels.keypoints, labels.classes
    pose = any(r.people for r in records)
    seg = any(r.regions for r in records)
    if not pose and not seg:
        raise ConvertError(f"no person keypoints, boxes, polygons or masks found in {len(records)} images")
    names = output_names(records)
    splits = assign_splits(records, names, layout.split, layout.val_fraction, layout.seed)
    planned = [f"{s}/images/{n}" for s, n in zip(splits, names)]
    planned += [f"annotations/{s}.json" for s in sorted(set(splits)) if pose]
    planned += [f"{s}/labels/{Path(n).stem}.png" for s, n in zip(splits, names) if seg] + ["classes.txt"] * seg
    _check_outputs(out, planned, layout.overwrite)
    classes_text = "\n".join(classes.targets) + "\n"
    if seg and not _same_classes(out / "classes.txt", classes_text):
        raise ConvertError(f"{out / 'classes.txt'} lists another class set; convert into another --out (or remove "
                           "it)")
    result = ConvertResult(out, {}, keypoints, classes, problems, DataReport(), pose, seg)
    coco = {s: {"images": [], "annotations": []} for s in sorted(set(splits))}
    background = 0 if layout.unlabelled == "background" else IGNORE_INDEX
    bar = tqdm(list(zip(records, names, splits)), desc="converting", unit="img", disable=len(records) < 50)
    for record, name, s in bar:
        pixels = _read(record, problems)
        if pixels is None:
            result.skipped_images.append(record.name)
            continue
        height, width = pixels.shape[:2]
        if record.size is not None and tuple(record.size) != (width, height):
            problems.add(record.image or record.ann_file, record.record, "width/height",
                         f"the annotation says {record.size[0]}x{record.size[1]}, the image is {width}x{height}; "
                         "its coordinates would not fit, the image is left out")
            result.skipped_images.append(record.name)
            continue
        scale = np.array([width, height], float) if record.normalised else np.ones(2)
        counts = result.splits.setdefault(s, Counter())
        _write_image(record, pixels, out, f"{s}/images/{name}")
        counts["images"] += 1
        image_id = len(coco[s]["images"]) + 1
        coco[s]["images"].append({"id": image_id, "file_name": name, "width": width, "height": height})
        for person in record.people:
            try:
                ann = person_annotation(person, keypoints, scale, width, height)
            except DataError as err:  # an outline mask that does not decode
                problems.add(record.ann_file, at(record.record, person.where), "mask", f"an outline that decodes "
                             f"({err}); the person is left out")
                continue
            if ann is None:
                problems.add(record.ann_file, at(record.record, person.where), "keypoints",
                             f"no keypoint of the set '{metainfo.name}' and no box; the person is left out",
                             fatal=False)
                continue
            coco[s]["annotations"].append({"id": len(coco[s]["annotations"]) + 1, "image_id": image_id, **ann})
            counts["people"] += 1
        if seg:
            result.images_without_regions += not record.regions
            labels = label_map(record, classes, scale, width, height, background, problems)
            write_image(out, f"{s}/labels/{Path(name).stem}.png", labels)
            counts["label maps"] += 1
    result.people = sum(c["people"] for c in result.splits.values())
    category = {"id": 1, "name": "person", "supercategory": "person", "keypoints": list(metainfo.keypoint_names),
                "skeleton": [[a + 1, b + 1] for a, b in metainfo.skeleton]}
    for s in result.splits:
        if pose:
            write_json(out, f"annotations/{s}.json", {**coco[s], "categories": [category]})
            check_coco(out / "annotations" / f"{s}.json", out / s / "images", metainfo, result.check, f"{s} pose")
        if seg:
            dense = DataReport()
            check_dense(out, s, SEG, len(classes.targets), dense)
            result.check.problems += dense.problems
            result.check.checked[f"{s} {SEG.task}"] = dense.checked.get(s, Counter())
    if seg:
        write_text(out, "classes.txt", classes_text)
    return result
