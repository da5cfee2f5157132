"""Write rendered samples as dense files plus COCO keypoint annotations.

Layout under the dataset root::

    dataset.json, classes.txt (the label maps' classes: the 29 Sapiens2 parts), annotations/{train,val}.json,
    <split>/{images,labels,masks,alpha,foreground,albedo}/<stem>.png,
    <split>/{normals,depth}/<stem>.npy, <split>/intrinsics/<stem>.txt
"""

import json
from pathlib import Path

import cv2
import numpy as np
from pycocotools import mask as mask_utils

from ..body_parts import SAPIENS2_PART_CLASSES
from ..boundary.writes import write_array, write_image, write_text
from .parts import KEYPOINT_NAMES, SKELETON
from .scene import Sample

SPLITS = ("train", "val")
DENSE_FOLDERS = {
    "images": ".png", "labels": ".png", "normals": ".npy", "masks": ".png",
    "depth": ".npy", "intrinsics": ".txt", "alpha": ".png", "foreground": ".png", "albedo": ".png",
}
MIN_AREA_FRACTION = 0.01
PERSON_CATEGORY = {
    "id": 1,
    "name": "person",
    "supercategory": "person",
    "keypoints": list(KEYPOINT_NAMES),
    "skeleton": [list(pair) for pair in SKELETON],
}


def image_stem(index: int, num_images: int) -> str:
    """Zero-padded image index (at least 6 digits), unique across splits."""
    return f"{index:0{max(6, len(str(max(num_images - 1, 0))))}d}"


def make_split_folders(split_dir: Path) -> None:
    for folder in DENSE_FOLDERS:
        (split_dir / folder).mkdir(parents=True, exist_ok=True)


def write_sample(split_dir: Path, stem: str, sample: Sample) -> None:
    """Write all dense files of one sample under ``split_dir``."""
    write_image(split_dir, f"images/{stem}.png", cv2.cvtColor(sample.image, cv2.COLOR_RGB2BGR))
    write_image(split_dir, f"labels/{stem}.png", sample.labels)
    write_image(split_dir, f"masks/{stem}.png", sample.mask.astype(np.uint8) * 255)
    write_image(split_dir, f"alpha/{stem}.png", np.round(sample.alpha * 255).astype(np.uint8))
    write_image(split_dir, f"foreground/{stem}.png", cv2.cvtColor(sample.foreground, cv2.COLOR_RGB2BGR))
    write_image(split_dir, f"albedo/{stem}.png", cv2.cvtColor(sample.albedo, cv2.COLOR_RGB2BGR))
    write_array(split_dir, f"normals/{stem}.npy", sample.normals.astype(np.float32))
    write_array(split_dir, f"depth/{stem}.npy", sample.depth.astype(np.float32))
    rows = "".join(" ".join(f"{value:.10g}" for value in row) + "\n" for row in sample.K)
    write_text(split_dir, f"intrinsics/{stem}.txt", rows)


def coco_records(sample: Sample, image_id: int, file_name: str) -> tuple:
    """COCO ``images`` entry and ``annotations`` of one sample.

    Annotation ids are ``10 * image_id + person + 1`` (unique across the whole dataset).
    People whose visible silhouette covers < 1% of the image, or with no visible (v=2)
    keypoint, are left out (they are still rendered).
    """
    height, width = sample.mask.shape
    image = {"id": image_id, "file_name": file_name, "height": height, "width": width}
    annotations = []
    for slot, person in enumerate(sample.people):
        area = int(person.silhouette.sum())
        visibility = person.keypoints[:, 2]
        if area < MIN_AREA_FRACTION * height * width or not np.any(visibility == 2):
            continue
        rows = np.flatnonzero(person.silhouette.any(axis=1))
        cols = np.flatnonzero(person.silhouette.any(axis=0))
        x0, y0 = int(cols[0]), int(rows[0])
        bbox = [x0, y0, int(cols[-1]) - x0 + 1, int(rows[-1]) - y0 + 1]
        rle = mask_utils.encode(np.asfortranarray(person.silhouette.astype(np.uint8)))
        keypoints = []
        for x, y, v in person.keypoints:
            keypoints += [round(float(x), 2), round(float(y), 2), int(v)]
        annotations.append({
            "id": 10 * image_id + slot + 1,
            "image_id": image_id,
            "category_id": 1,
            "keypoints": keypoints,
            "num_keypoints": int(np.count_nonzero(visibility)),
            "bbox": [float(v) for v in bbox],
            "area": float(area),
            "iscrowd": 0,
            "segmentation": {"size": [height, width], "counts": rle["counts"].decode("ascii")},
        })
    return image, annotations


def write_json(path: Path, document: dict, indent: int | None = None) -> None:
    write_text(path.parent, path.name, json.dumps(document, indent=indent, separators=None if indent else (",", ":")))


def write_classes(root: Path) -> None:
    """``classes.txt``: the names of the label maps' class ids, one a line (as ``convert`` writes it)."""
    write_text(root, "classes.txt", "\n".join(SAPIENS2_PART_CLASSES) + "\n")


def write_coco(path: Path, images: list, annotations: list) -> None:
    """Write one COCO keypoints file."""
    write_json(path, {"images": images, "annotations": annotations, "categories": [PERSON_CATEGORY]})
