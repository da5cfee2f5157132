"""COCO ground truth (not results): what any COCO reader opens, and CVAT imports as "COCO Keypoints 1.0" / "COCO
1.0", laid out as CVAT exports it: ``OUT/annotations/person_keypoints_default.json`` (pose) or
``OUT/annotations/instances_default.json`` (seg) and ``OUT/images/KEY``.

Pose: one annotation per person (``keypoints`` x, y, v with v 2, or 0 and x = y = 0 for a keypoint scored below
``--min_score``; ``bbox``, ``area``, ``num_keypoints``, ``iscrowd`` 0) in one ``person`` category naming the keypoints
and the skeleton (1-based). Seg: one annotation per class present in an image, its ``segmentation`` an uncompressed
RLE of the image (``counts`` over the pixels in column-major order, the first run background; ``iscrowd`` 1, as COCO
marks RLE masks), one category per class but the background (``id`` = the class id). Annotations carry the model's
``score`` (pose also ``keypoint_scores``); ``info`` names the model.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from datamodules.boundary.writes import copy_file, write_json
from sapiens2_ft.labelling.predictions import ImagePrediction, LabelSet


def rle_counts(mask: np.ndarray) -> list[int]:
    """COCO's uncompressed RLE ``counts`` of a bool (H, W) mask: run lengths over the column-major pixels, starting
    with a run of zeros (0 when the first pixel is set)."""
    flat = np.asarray(mask, bool).reshape(-1, order="F")
    edges = np.flatnonzero(flat[1:] != flat[:-1]) + 1
    runs = np.diff(np.concatenate([[0], edges, [flat.size]]))
    return ([0] if flat.size and flat[0] else []) + runs.tolist()


def _bbox(mask: np.ndarray) -> list[float]:
    ys, xs = np.nonzero(mask)
    return [float(xs.min()), float(ys.min()), float(xs.max() - xs.min() + 1), float(ys.max() - ys.min() + 1)]


class CocoFiles:
    """The COCO json and the images in ``out`` (see the module docstring)."""

    name = "coco"

    def __init__(self, out: Path, labels: LabelSet, min_score: float = 0.0, **_):
        self.out, self.labels, self.min_score = Path(out), labels, min_score
        self.images: list[dict] = []
        self.annotations: list[dict] = []

    @property
    def file(self) -> str:
        return "person_keypoints_default.json" if self.labels.kind == "keypoint" else "instances_default.json"

    def add(self, prediction: ImagePrediction) -> None:
        copy_file(prediction.path, self.out, f"images/{prediction.key}")
        image_id = len(self.images) + 1
        width, height = prediction.size
        self.images.append({"id": image_id, "file_name": prediction.key, "width": width, "height": height})
        if prediction.people is not None:
            for person in prediction.people:
                kept = np.asarray(person["scores"]) >= self.min_score
                flat = np.zeros((len(kept), 3))
                flat[kept, :2] = np.asarray(person["points"], dtype=np.float64)[kept].round(2)
                flat[kept, 2] = 2
                x, y, w, h = (round(float(v), 2) for v in person["bbox"][:4])
                self._add(image_id, 1, {"keypoints": flat.reshape(-1).tolist(), "num_keypoints": int(kept.sum()),
                                        "bbox": [x, y, w, h], "area": round(w * h, 2), "iscrowd": 0,
                                        "score": float(person["score"]),
                                        "keypoint_scores": [float(s) for s in person["scores"]]})
            return
        for class_id in np.unique(prediction.classes).tolist():
            if class_id == 0:
                continue
            mask = prediction.classes == class_id
            self._add(image_id, int(class_id), {
                "segmentation": {"counts": rle_counts(mask), "size": [height, width]}, "area": int(mask.sum()),
                "bbox": _bbox(mask), "iscrowd": 1, "score": round(float(prediction.confidence[mask].mean()), 4)})

    def _add(self, image_id: int, category: int, fields: dict) -> None:
        self.annotations.append({"id": len(self.annotations) + 1, "image_id": image_id, "category_id": category,
                                 **fields})

    def categories(self) -> list[dict]:
        if self.labels.kind == "keypoint":
            return [{"id": 1, "name": "person", "supercategory": "person", "keypoints": list(self.labels.names),
                     "skeleton": [[a + 1, b + 1] for a, b in self.labels.skeleton]}]
        return [{"id": k, "name": name, "supercategory": ""} for k, name in enumerate(self.labels.names) if k]

    def close(self) -> str:
        info = {"description": f"sapiens2-ft pre-annotations: {self.labels.model_version}",
                "version": self.labels.model_version}
        write_json(self.out, f"annotations/{self.file}", {"info": info, "licenses": [], "images": self.images,
                                                          "annotations": self.annotations,
                                                          "categories": self.categories()})
        return (f"COCO: {len(self.images)} images, {len(self.annotations)} annotations -> "
                f"{self.out / 'annotations' / self.file} and {self.out / 'images'}")
