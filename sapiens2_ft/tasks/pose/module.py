"""Top-down pose estimation: a Sapiens2 pose model trained on UDP Gaussian heatmaps.

Train: the batch carries keypoints in crop pixels; heatmap targets are rendered on the device
(308 x 256 x 192 float32 targets would be 60 MB per person through the DataLoader), loss =
visibility-weighted MSE x ``loss_weight`` (or soft-target cross-entropy for from-scratch runs).
Val: flip test, DARK-UDP decode, inverse crop affine to image pixels, OKS AP via pycocotools.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import torch

from datamodules.boundary.writes import write_json
from datamodules.errors import BadConfig
from datamodules.keypoints.metainfo import MetainfoError, load_metainfo
from sapiens2_ft.tasks.base import TaskModule
from sapiens2_ft.tasks.distill import Teacher, heatmap_distill
from sapiens2_ft.tasks.pose import draw
from sapiens2_ft.tasks.pose.codec import encode_heatmaps, input_to_heatmap_coords
from sapiens2_ft.tasks.pose.inference import LOGITS_OUTPUT, PoseBatch, PoseInference, PoseOutputs
from sapiens2_ft.tasks.pose.loss import heatmap_cross_entropy, weighted_heatmap_mse
from sapiens2_ft.tasks.pose.metric import CocoKeypointAP
from sapiens2_ft.tasks.pose.spec import POSE
from sapiens2_ft.tasks.visualize import MIN_PANEL_HEIGHT, enlarge, image_rgb, side_by_side

LOSSES = {"mse": weighted_heatmap_mse, "heatmap_ce": heatmap_cross_entropy}


class PoseModule(TaskModule):
    """Fine-tune ``Sapiens2ForPoseEstimation`` on a keypoint set (the ``model.*`` keys of every task:
    ``TaskModule``).

    Args:
        keypoints: Keypoint set, built-in name or YAML path (linked from ``data.keypoints``).
        sigma: Gaussian sigma of the targets in heatmap pixels (upstream: 6 at 256x192, 2 at 64x48).
        loss: ``mse`` (upstream, for pretrained models) or ``heatmap_ce`` (from-scratch runs).
        loss_weight: Multiplier of the loss (upstream MSE: 10).
        flip_test: Average with the flipped-back heatmaps of the mirrored crop at validation.
    """

    spec = POSE
    inference_class = PoseInference
    panel_outputs = ("coords", "scores")  # not the heatmaps

    @classmethod
    def check_options(cls, **options) -> list[str]:
        problems = super().check_options(**options)
        try:
            load_metainfo(options.get("keypoints", "coco17"))
        except MetainfoError as err:
            problems.append(f"data.keypoints: {err}")
        return problems

    def __init__(
        self,
        keypoints: str = "coco17",
        sigma: float = 2.0,
        loss: Literal["mse", "heatmap_ce"] = "mse",
        loss_weight: float = 10.0,
        flip_test: bool = True,
        **kwargs,
    ):
        heatmap_output = LOGITS_OUTPUT if loss == "heatmap_ce" else "heatmaps"
        super().__init__(**kwargs, _inference_options=dict(keypoints=keypoints, flip_test=flip_test, sigma=sigma,
                                                           heatmap_output=heatmap_output))
        self.metainfo = self.inference.metainfo
        self.loss_fn = LOSSES[loss]

    @classmethod
    def options_from_model(cls, directory: Path, config, labels: str | None = None) -> dict:
        """The inference class's (``PoseInference.options_from_model``), a logits head as ``loss: heatmap_ce``
        (decoded as one); ``sigma`` stays the recipe's (``model.sigma``: the loss's targets and the score radius)."""
        options = PoseInference.options_from_model(directory, config, labels)
        options.pop("sigma", None)
        logits = options.pop("heatmap_output", None) == LOGITS_OUTPUT
        return {**options, **({"loss": "heatmap_ce"} if logits else {})}

    def loss_terms(self, outputs: PoseOutputs, batch: PoseBatch) -> dict[str, torch.Tensor]:
        """UDP targets rendered here from the crop keypoints; ``loss`` = ``loss_weight`` x the heatmap loss."""
        heatmaps = outputs["heatmaps"]
        hm_size = tuple(heatmaps.shape[-2:])
        coords = input_to_heatmap_coords(batch["keypoints"], self.hparams.input_size, hm_size)
        targets, weights = encode_heatmaps(coords, batch["keypoint_weights"], hm_size, self.hparams.sigma)
        return {"loss": self.hparams.loss_weight * self.loss_fn(heatmaps, targets, weights)}

    def teacher_labels(self) -> str:
        """The student's keypoint set: the teacher's heatmap rows of the same names, in its order."""
        return self.hparams.keypoints

    def check_teacher(self, teacher: Teacher) -> None:
        if teacher.inference.outputs_logits != self.inference.outputs_logits:
            kind = {True: "heatmap cross-entropy logits", False: "MSE heatmaps"}
            raise BadConfig(f"model.distill.teacher {self.distill.teacher} outputs "
                            f"{kind[teacher.inference.outputs_logits]}, the student (model.loss "
                            f"{self.hparams.loss}) {kind[self.inference.outputs_logits]}: give a teacher of the same kind")

    def distill_loss(self, student: PoseOutputs, teacher: PoseOutputs, mask=None) -> torch.Tensor:
        """The teacher's heatmaps on the same crop (``tasks.distill.heatmap_distill``), x ``loss_weight`` as the
        labelled loss is."""
        return self.hparams.loss_weight * heatmap_distill(student["heatmaps"], teacher["heatmaps"],
                                                          self.inference.outputs_logits, self.distill.temperature)

    def on_validation_epoch_start(self) -> None:
        if self.val_metrics is None:
            self.val_metrics = self.ap_metric(self.trainer.datamodule.val_annotation_file).to(self.device)
        super().on_validation_epoch_start()

    def ap_metric(self, ann_file) -> CocoKeypointAP:
        """COCO AP of this set against ``ann_file``: its keypoints taken by name; sets with groups
        (coco_wholebody, sapiens2_308, coco17_feet) also give AP_<group>."""
        return CocoKeypointAP(ann_file, self.metainfo.sigmas, groups=self.metainfo.group_ids,
                              keypoint_names=self.metainfo.keypoint_names)

    def update_metrics(self, outputs: PoseOutputs, batch: PoseBatch) -> None:
        """Keypoints back to image pixels (the inverse crop affine), scored against the annotation file."""
        coords = outputs["coords"]
        affine = batch["inverse_affine"].to(coords.dtype)  # crop px -> image px, (B, 2, 3)
        image_coords = coords @ affine[:, :, :2].transpose(1, 2) + affine[:, None, :, 2]
        self.val_metrics.update(batch["image_id"], image_coords, outputs["scores"], batch["box_score"], batch["area"])

    def panel(self, outputs: PoseOutputs, batch: PoseBatch, i: int) -> tuple[str, np.ndarray]:
        """``pose``: ground-truth and predicted skeletons on the crop."""
        crop, skeleton = image_rgb(batch, i), self.metainfo.skeleton
        big = enlarge(crop, MIN_PANEL_HEIGHT)  # drawn after enlarging: thin lines on small CPU crops
        f = big.shape[0] / crop.shape[0]

        def at_scale(points):  # pixel centres of the crop -> of the enlarged crop
            return (points.float().numpy() + 0.5) * f - 0.5

        truth = draw.skeleton(big, at_scale(batch["keypoints"][i]), batch["keypoint_weights"][i].numpy() > 0, skeleton,
                              draw.TRUTH_COLOR)
        shown = outputs["scores"][i].float().numpy() > draw.KEYPOINT_DRAW_THRESHOLD
        predicted = draw.skeleton(big, at_scale(outputs["coords"][i]), shown, skeleton, draw.PREDICTED_COLOR)
        return "pose", side_by_side([truth, predicted], ["ground truth", "prediction"])

    def write_validation_outputs(self, run_dir: Path) -> None:
        """``predictions.json``: COCO keypoint results of the last validation (after rescoring and OKS-NMS)."""
        write_json(run_dir, "predictions.json", self.val_metrics.results if self.val_metrics is not None else [])
