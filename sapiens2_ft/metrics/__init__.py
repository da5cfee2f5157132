"""Evaluation metrics."""

from sapiens2_ft.metrics.coco_keypoints import CocoKeypointAP
from sapiens2_ft.metrics.matting import MattingMetrics
from sapiens2_ft.metrics.normal import NormalMetrics
from sapiens2_ft.metrics.oks_nms import oks_iou, oks_nms
from sapiens2_ft.metrics.pointmap import PointmapMetrics
from sapiens2_ft.metrics.segmentation import SegmentationMetrics

__all__ = [
    "CocoKeypointAP",
    "MattingMetrics",
    "NormalMetrics",
    "PointmapMetrics",
    "SegmentationMetrics",
    "oks_iou",
    "oks_nms",
]
