"""Person boxes from a transformers object-detection model, for top-down pose on ordinary photos.

``PersonDetector(source)`` loads any ``AutoModelForObjectDetection`` checkpoint of the DETR family (default
``PekingU/rtdetr_r50vd``: RT-DETR R50-vd trained on COCO, Apache-2.0) with its own image processor. On an install
without torchvision (the CPU torch of this project), ``AutoImageProcessor`` falls back to the processor's PIL
variant (``RTDetrImageProcessorPil`` for RT-DETR), so no preprocessing of ours is needed. The person class is
found by its label name; its boxes are thresholded by score and suppressed by IoU (NMS), for a whole batch of
images at once.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch

from datamodules.errors import BadInput
from sapiens2_ft.models.factory import PretrainedNotFoundError, resolve_pretrained

DEFAULT_DETECTOR = "PekingU/rtdetr_r50vd"
PERSON_LABELS = ("person", "people", "human", "pedestrian")


class DetectorError(BadInput):
    """A detector that cannot be loaded or has no person class."""


def box_iou(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """IoU of (N, 4) and (M, 4) xyxy boxes -> (N, M)."""
    area_a = (a[:, 2] - a[:, 0]).clamp_min(0) * (a[:, 3] - a[:, 1]).clamp_min(0)
    area_b = (b[:, 2] - b[:, 0]).clamp_min(0) * (b[:, 3] - b[:, 1]).clamp_min(0)
    top_left = torch.maximum(a[:, None, :2], b[None, :, :2])
    bottom_right = torch.minimum(a[:, None, 2:], b[None, :, 2:])
    inter = (bottom_right - top_left).clamp_min(0).prod(-1)
    return inter / (area_a[:, None] + area_b[None, :] - inter).clamp_min(1e-9)


def xywh_to_xyxy(boxes) -> torch.Tensor:
    """(N, 4+) ``[x, y, w, h, ...]`` boxes (any array-like) -> (N, 4) float64 xyxy."""
    b = torch.as_tensor(np.asarray(boxes, dtype=np.float64).reshape(len(boxes), -1)[:, :4])
    return torch.cat([b[:, :2], b[:, :2] + b[:, 2:]], dim=1)


def batched_nms(boxes: torch.Tensor, scores: torch.Tensor, groups: torch.Tensor, iou: float) -> torch.Tensor:
    """Greedy NMS within each group (e.g. each image) in one pass: indices kept, by descending score.

    The boxes of different groups are moved apart so that they never overlap, then one IoU matrix is built.
    """
    if len(boxes) == 0:
        return torch.zeros(0, dtype=torch.long)
    offset = (boxes.max() - boxes.min() + 1) * groups.to(boxes.dtype)
    shifted = boxes + offset[:, None]
    order = scores.argsort(descending=True, stable=True)
    overlaps = box_iou(shifted[order], shifted[order]) > iou
    keep = torch.ones(len(order), dtype=torch.bool)
    for i in range(len(order)):
        if keep[i]:
            keep[i + 1:] &= ~overlaps[i, i + 1:]
    return order[keep]


def person_label(id2label: dict) -> int:
    """The class id of people in a detector's label map (by name)."""
    for index, name in sorted(id2label.items(), key=lambda item: int(item[0])):
        if str(name).strip().lower() in PERSON_LABELS:
            return int(index)
    names = [id2label[k] for k in sorted(id2label, key=int)][:10]
    raise DetectorError(f"the detector has no person class (labels {names}...); give a COCO detector, "
                        f"e.g. {DEFAULT_DETECTOR}")


class PersonDetector:
    """Person boxes ``[x, y, w, h, score]`` (image pixels) for batches of RGB images.

    Args:
        source: A hub id or a local directory holding the detector (``config.json``, weights and
            ``preprocessor_config.json``).
        threshold: Boxes of a lower person score are dropped.
        nms_iou: Of two person boxes overlapping by more than this IoU, the lower-scoring one is dropped.
        device: Where the detector runs.
    """

    def __init__(self, source: str = DEFAULT_DETECTOR, threshold: float = 0.5, nms_iou: float = 0.6,
                 device: str = "cpu"):
        from transformers import AutoImageProcessor, AutoModelForObjectDetection

        try:
            directory = resolve_pretrained(source, key="detector")
        except PretrainedNotFoundError as err:
            raise DetectorError(str(err)) from None
        if not (Path(directory) / "preprocessor_config.json").is_file():
            raise DetectorError(f"--detector: {directory} has no preprocessor_config.json (the detector's image "
                                f"processor, saved beside it by save_pretrained)")
        self.source, self.threshold, self.nms_iou, self.device = source, threshold, nms_iou, device
        try:  # trust_remote_code=False: a detector directory's own Python code never runs (nor is asked about)
            self.processor = AutoImageProcessor.from_pretrained(directory, trust_remote_code=False)
            self.model = AutoModelForObjectDetection.from_pretrained(directory, trust_remote_code=False)
        except ValueError as err:
            raise DetectorError(f"--detector: {directory}: {' '.join(str(err).split())}") from None
        self.model = self.model.eval().to(device)
        self.person = person_label(self.model.config.id2label)

    @torch.no_grad()
    def __call__(self, images: list[np.ndarray]) -> list[np.ndarray]:
        """One (N, 5) float64 array of person boxes per image, by descending score."""
        if not images:
            return []
        inputs = self.processor(images=list(images), return_tensors="pt").to(self.device)
        outputs = self.model(**inputs)
        sizes = [image.shape[:2] for image in images]
        found = self.processor.post_process_object_detection(outputs, threshold=self.threshold, target_sizes=sizes)
        return person_boxes(found, sizes, self.person, self.nms_iou)


def person_boxes(found: list[dict], sizes: list[tuple[int, int]], person: int, nms_iou: float) -> list[np.ndarray]:
    """Per image: the person detections of a processor's ``post_process_object_detection`` output, clipped to
    the image, without empty boxes, after NMS over all images at once -> (N, 5) ``[x, y, w, h, score]``."""
    boxes, scores, groups = [], [], []
    for i, (result, (height, width)) in enumerate(zip(found, sizes)):
        is_person = result["labels"] == person
        xyxy = result["boxes"][is_person].detach().float().cpu()
        xyxy[:, 0::2] = xyxy[:, 0::2].clamp(0, width)
        xyxy[:, 1::2] = xyxy[:, 1::2].clamp(0, height)
        nonempty = (xyxy[:, 2] > xyxy[:, 0]) & (xyxy[:, 3] > xyxy[:, 1])
        boxes.append(xyxy[nonempty])
        scores.append(result["scores"][is_person].detach().float().cpu()[nonempty])
        groups.append(torch.full((int(nonempty.sum()),), i))
    boxes, scores, groups = torch.cat(boxes), torch.cat(scores), torch.cat(groups)
    keep = batched_nms(boxes, scores, groups, nms_iou)
    per_image = []
    for i in range(len(sizes)):
        kept = keep[groups[keep] == i]
        xyxy = boxes[kept].double().numpy()
        xywh = np.concatenate([xyxy[:, :2], xyxy[:, 2:] - xyxy[:, :2]], axis=1)
        per_image.append(np.concatenate([xywh, scores[kept].double().numpy()[:, None]], axis=1))
    return per_image
