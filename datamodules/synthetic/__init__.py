"""Procedural synthetic human dataset (the project's embedded demo data).

Renders articulated 3-D mannequin figures with keypoints (COCO-17 and the feet), Sapiens2 body-part
labels, normals, depth, intrinsics, alpha mattes and foregrounds.  See ``generate.py``
for the on-disk layout and ``python -m datamodules.synthetic --help`` for the CLI.
"""

from .generate import ensure_dataset, generate_dataset, read_parameters
from .in_use import DatasetInUseError
from .parts import COCO_KEYPOINT_NAMES, COCO_SKELETON, KEYPOINT_NAMES, SAPIENS2_PART_CLASSES, SKELETON
from .scene import Sample, render_sample

__all__ = [
    "DatasetInUseError",
    "COCO_KEYPOINT_NAMES",
    "COCO_SKELETON",
    "KEYPOINT_NAMES",
    "SKELETON",
    "SAPIENS2_PART_CLASSES",
    "Sample",
    "ensure_dataset",
    "generate_dataset",
    "read_parameters",
    "render_sample",
]
