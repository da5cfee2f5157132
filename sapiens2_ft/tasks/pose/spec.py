"""The pose task as the rest of the package sees it (``tasks/spec.py`` groups the fields by reader)."""

from __future__ import annotations

from datamodules.keypoints.metainfo import load_metainfo
from sapiens2_ft.tasks import heads
from sapiens2_ft.tasks.pose import draw
from sapiens2_ft.tasks.spec import KEYPOINT_LINKS, Data, Export, Model, TaskSpec, Training


def _sapiens2_308() -> list[str]:
    return list(load_metainfo("sapiens2_308").keypoint_names)


POSE = TaskSpec(
    "pose",
    Training("sapiens2_ft.tasks.pose.module.PoseModule", "datamodules.pose_datamodule.PoseDataModule",
             ("val/AP", "max"), links=KEYPOINT_LINKS),
    Model("Sapiens2ForPoseEstimation", label_kind="keypoint", label_arg="keypoints", heads=heads.POSE_HEADS,
          released_labels=_sapiens2_308),
    Data(draw_sample=draw.draw_sample),
    Export(auto_class="AutoModelForPoseEstimation", pipeline_tag="keypoint-detection",
           predicts="the keypoints of each person (top-down: one crop per person box, UDP heatmaps) with a score per "
                    "keypoint",
           decode="heatmaps (B, K, h, w) of person crops (each box widened to the input aspect, affine-warped to the "
                  "input size). With heatmap_output 'logits', take the softmax over each map first. Keypoint k: the "
                  "argmax (x, y) of map k (DARK refinement optional), in crop pixels x * (W - 1) / (w - 1), "
                  "y * (H - 1) / (h - 1) (UDP), then through the inverse crop affine. Score, in [0, 1], at the "
                  "argmax: the map's value clipped to [0, 1] (heatmaps), or the probability mass of the "
                  "(2r + 1) x (2r + 1) pixels around it, r = max(1, round(2 sigma)) with sigma the preprocessor's "
                  "keypoint_heatmap_sigma (logits). Flip test (before all this): average the maps (the "
                  "probabilities) with those of the mirrored crop, mirrored back and rows swapped by flip_pairs.",
           processor={"keypoint_heatmap_downscale_factor": 4}),
    inference="sapiens2_ft.tasks.pose.inference.PoseInference",
)
