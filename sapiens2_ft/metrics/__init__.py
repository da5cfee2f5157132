"""Evaluation metrics."""

from sapiens2_ft.metrics.coco_keypoints import CocoKeypointAP
from sapiens2_ft.metrics.oks_nms import oks_iou, oks_nms

__all__ = ["CocoKeypointAP", "oks_iou", "oks_nms"]
