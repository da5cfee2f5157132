"""Top-down pose: one crop per person box, the crops of several images batched together, flip test and DARK-UDP
decode (the module's ``infer``), keypoints mapped back through the inverse crop affine."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import torch

from datamodules.transforms import affine
from sapiens2_ft.models.preprocessing import normalize_images
from sapiens2_ft.predict.inputs import output_name
from sapiens2_ft.tasks.pose.metric import rescore
from sapiens2_ft.tasks.pose.draw import draw_people

KEYPOINT_SCORE_THRESHOLD = 0.2  # instance rescoring, as in validation


@torch.no_grad()
def estimate(module, images: list[np.ndarray], boxes: list[np.ndarray], batch_size: int) -> list[list[dict]]:
    """Per image, per box: ``{"points": (K, 2) image px, "scores": (K,), "score": instance score, "bbox"}``.
    The crops of all images go through the model in batches of ``batch_size``."""
    input_size = tuple(module.hparams.input_size)
    owners = [(i, box) for i, image_boxes in enumerate(boxes) for box in image_boxes]
    people: list[list[dict]] = [[] for _ in images]
    for start in range(0, len(owners), batch_size):
        chunk = owners[start:start + batch_size]
        matrices = [affine.crop_matrix(*affine.box_to_center_scale(box[:4], input_size[1] / input_size[0]), 0.0,
                                       input_size) for _, box in chunk]
        crops = np.stack([affine.warp_image(images[i], m, input_size, affine.crop_interpolation(m))
                          for (i, _), m in zip(chunk, matrices)])
        outputs = module.infer(normalize_images(torch.from_numpy(crops).permute(0, 3, 1, 2).to(module.device)))
        coords, scores = outputs["coords"].cpu().double().numpy(), outputs["scores"].cpu().double().numpy()
        instance_scores = rescore(scores, np.array([box[4] for _, box in chunk]), KEYPOINT_SCORE_THRESHOLD)
        for k, ((i, box), matrix) in enumerate(zip(chunk, matrices)):
            people[i].append({"points": affine.transform_points(coords[k], affine.invert(matrix)),
                              "scores": scores[k], "score": float(instance_scores[k]), "bbox": box[:4]})
    return people


def coco_results(image_id: int, people: list[dict]) -> list[dict]:
    """COCO keypoint results of one image."""
    return [{"image_id": image_id, "category_id": 1,
             "keypoints": np.concatenate([p["points"], p["scores"][:, None]], axis=1).reshape(-1).round(2).tolist(),
             "score": p["score"], "bbox": np.asarray(p["bbox"], dtype=np.float64).round(2).tolist()} for p in people]


class PoseResults:
    """What pose prediction writes into ``out``: ``overlays/NAME.jpg`` per image as it comes, and at ``close``
    ``keypoints.json`` (COCO keypoint results) and ``images.json`` (the images and person category they refer to)."""

    def __init__(self, out: Path, metainfo):
        self.out, self.metainfo = out, metainfo
        self.results: list[dict] = []
        self.images: list[dict] = []

    def add(self, key: str, image_id: int, image: np.ndarray, people: list[dict]) -> None:
        height, width = image.shape[:2]
        self.images.append({"id": image_id, "file_name": key, "height": height, "width": width})
        self.results += coco_results(image_id, people)
        overlay_file = self.out / "overlays" / f"{output_name(key)}.jpg"
        overlay_file.parent.mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(overlay_file), draw_people(image, people, self.metainfo.skeleton)[..., ::-1])

    def close(self) -> int:
        """Writes the json files; returns the number of people."""
        names = list(self.metainfo.keypoint_names)
        category = {"id": 1, "name": "person", "supercategory": "person", "keypoints": names,
                    "skeleton": [[a + 1, b + 1] for a, b in self.metainfo.skeleton]}
        self.out.mkdir(parents=True, exist_ok=True)
        (self.out / "keypoints.json").write_text(json.dumps(self.results))
        (self.out / "images.json").write_text(json.dumps({"images": self.images, "annotations": [],
                                                          "categories": [category]}))
        return len(self.results)
