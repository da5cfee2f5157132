"""What ``predict`` writes of a pose model: COCO keypoint results, the images they refer to, an overlay per image."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from datamodules.boundary.writes import write_image, write_json
from sapiens2_ft.tasks.inference import output_name
from sapiens2_ft.tasks.pose.draw import draw_people


def keypoint_triplets(points: np.ndarray, scores: np.ndarray) -> list[float]:
    """``[x1, y1, s1, x2, ...]``: image pixels to 0.01 px, each score as the model gave it (``Person``: to 4
    decimals, the same number as the Python API and the app give)."""
    points = np.asarray(points, dtype=np.float64).round(2)
    return np.concatenate([points, np.asarray(scores, dtype=np.float64)[:, None]], axis=1).reshape(-1).tolist()


def coco_results(image_id: int, people: list[dict]) -> list[dict]:
    """COCO keypoint results of one image."""
    return [{"image_id": image_id, "category_id": 1, "keypoints": keypoint_triplets(p["points"], p["scores"]),
             "score": p["score"], "bbox": np.asarray(p["bbox"], dtype=np.float64).round(2).tolist()} for p in people]


class PoseResults:
    """``overlays/NAME.jpg`` per image as it comes, and at ``close`` ``keypoints.json`` (COCO keypoint results) and
    ``images.json`` (the images and person category they refer to), in ``out``."""

    def __init__(self, out: Path, metainfo):
        self.out, self.metainfo = out, metainfo
        self.results: list[dict] = []
        self.images: list[dict] = []

    def add(self, key: str, image_id: int, image: np.ndarray, people: list[dict]) -> None:
        height, width = image.shape[:2]
        self.images.append({"id": image_id, "file_name": key, "height": height, "width": width})
        self.results += coco_results(image_id, people)
        write_image(self.out, f"overlays/{output_name(key)}.jpg",
                    draw_people(image, people, self.metainfo.skeleton)[..., ::-1])

    def close(self) -> int:
        """Writes the json files; returns the number of people."""
        names = list(self.metainfo.keypoint_names)
        category = {"id": 1, "name": "person", "supercategory": "person", "keypoints": names,
                    "skeleton": [[a + 1, b + 1] for a, b in self.metainfo.skeleton]}
        write_json(self.out, "keypoints.json", self.results)
        write_json(self.out, "images.json", {"images": self.images, "annotations": [], "categories": [category]})
        return len(self.results)

    def summary(self, count: int, images: int) -> str:
        return f"{count} people in {images} images -> {self.out / 'keypoints.json'}, overlays in {self.out / 'overlays'}"
