"""Top-down pose estimation: a Sapiens2 pose model trained on UDP Gaussian heatmaps.

Train: the batch carries keypoints in crop pixels; heatmap targets are rendered on the device
(308 x 256 x 192 float32 targets would be 60 MB per person through the DataLoader), loss =
visibility-weighted MSE x ``loss_weight`` (or soft-target cross-entropy for from-scratch runs).
Val: flip test, DARK-UDP decode, inverse crop affine to image pixels, OKS AP via pycocotools.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal, Sequence

import numpy as np
import torch

from datamodules.keypoints.metainfo import SET_FILE, MetainfoError, builtin_set_with, load_metainfo
from sapiens2_ft.tasks.base import TaskModule
from sapiens2_ft.tasks.pose.codec import (
    decode_heatmaps,
    encode_heatmaps,
    flip_heatmaps,
    heatmap_probabilities,
    heatmap_to_input_coords,
    input_to_heatmap_coords,
    window_mass,
)
from sapiens2_ft.tasks.pose.loss import heatmap_cross_entropy, weighted_heatmap_mse
from sapiens2_ft.tasks.pose.metric import CocoKeypointAP
from sapiens2_ft.tasks.pose import draw
from sapiens2_ft.tasks.visualize import MIN_PANEL_HEIGHT, enlarge, image_rgb, side_by_side

LOSSES = {"mse": weighted_heatmap_mse, "heatmap_ce": heatmap_cross_entropy}
# heatmap_ce heads output logits: this ``config.heatmap_output`` tells exported models' users (predict, the API).
LOGITS_OUTPUT = "logits"


def score_radius(sigma: float) -> int:
    """Heatmap px: a CE keypoint's score is its probability mass within 2 sigma (x, y) of it, ~0.95 for a model
    that predicts its target exactly (bench/pose_scores.py chose 2 sigma on the demo's checkpoint)."""
    return max(1, round(2 * sigma))


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

    task = "pose"
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
        super().__init__(**kwargs)
        self.metainfo = load_metainfo(keypoints)
        self.labels = list(self.metainfo.keypoint_names)
        self.register_buffer("flip_indices", torch.tensor(self.metainfo.flip_indices), persistent=False)
        self.loss_fn = LOSSES[loss]

    def model_options(self) -> dict:
        return {"flip_pairs": self.metainfo.flip_pairs}

    @classmethod
    def options_from_model(cls, directory: Path, config, labels: str | None = None) -> dict:
        """The keypoint set: ``labels`` (a set name or YAML; its keypoints are the model's rows of the same names),
        else the export's ``keypoints.yaml``, else the built-in set of the model's rows (a released 308-keypoint
        model: ``sapiens2_308``); ``loss: heatmap_ce`` for a head that outputs logits (``config.heatmap_output``)."""
        options = {"loss": "heatmap_ce"} if getattr(config, "heatmap_output", None) == LOGITS_OUTPUT else {}
        if labels is None:
            exported = Path(directory) / SET_FILE
            labels = str(exported) if exported.is_file() else builtin_set_with(cls.row_names(directory, config))
        if labels is None:
            raise ValueError(f"{directory} has no {SET_FILE} and its {config.num_labels} keypoints are no built-in "
                             f"set; give the keypoint set (a built-in name or a YAML file)")
        try:
            metainfo = load_metainfo(labels)
        except MetainfoError as err:
            raise ValueError(str(err)) from None
        cls.check_rows(directory, config, list(metainfo.keypoint_names))
        return {"keypoints": labels, **options}

    def build(self):
        model, report = super().build()
        if self.hparams.loss == "heatmap_ce":
            model.config.heatmap_output = LOGITS_OUTPUT
        return model, report

    @property
    def outputs_logits(self) -> bool:
        return self.hparams.loss == "heatmap_ce"

    def predict(self, pixel_values: torch.Tensor, size: Sequence[int] | None = None) -> dict[str, torch.Tensor]:
        """``heatmaps`` (B, K, h, w) of the crops (``size`` is not used: heatmaps keep their resolution)."""
        return {"heatmaps": self.model(pixel_values).heatmaps}

    def infer(self, pixel_values: torch.Tensor, size: Sequence[int] | None = None) -> dict[str, torch.Tensor]:
        """``heatmaps`` (flip-tested when enabled) and the decoded keypoints: ``coords`` (B, K, 2) in crop pixels
        and ``scores`` (B, K). MSE heads: scores are the heatmap maxima. Cross-entropy heads: each map's softmax
        (flip test averages these distributions) is decoded, a score is the probability mass within
        ``score_radius(sigma)`` px of the keypoint (a confidence in [0, 1]), and ``heatmaps`` are the log-probabilities
        (logits of the same distribution, for the loss)."""
        def maps(x: torch.Tensor) -> torch.Tensor:
            out = self.predict(x)["heatmaps"]
            return heatmap_probabilities(out) if self.outputs_logits else out

        heatmaps = maps(pixel_values)
        if self.hparams.flip_test:
            heatmaps = (heatmaps + flip_heatmaps(maps(pixel_values.flip(-1)), self.flip_indices)) / 2
        coords, scores = decode_heatmaps(heatmaps.float())
        if self.outputs_logits:
            scores = window_mass(heatmaps, coords, score_radius(self.hparams.sigma))
            heatmaps = heatmaps.clamp_min(torch.finfo(torch.float32).tiny).log()
        coords = heatmap_to_input_coords(coords, self.hparams.input_size, tuple(heatmaps.shape[-2:]))
        return {"heatmaps": heatmaps, "coords": coords, "scores": scores}

    def loss_terms(self, outputs: dict, batch: dict) -> dict[str, torch.Tensor]:
        """UDP targets rendered here from the crop keypoints; ``loss`` = ``loss_weight`` x the heatmap loss."""
        heatmaps = outputs["heatmaps"]
        hm_size = tuple(heatmaps.shape[-2:])
        coords = input_to_heatmap_coords(batch["keypoints"], self.hparams.input_size, hm_size)
        targets, weights = encode_heatmaps(coords, batch["keypoint_weights"], hm_size, self.hparams.sigma)
        return {"loss": self.hparams.loss_weight * self.loss_fn(heatmaps, targets, weights)}

    def on_validation_epoch_start(self) -> None:
        if self.val_metrics is None:
            self.val_metrics = self.ap_metric(self.trainer.datamodule.val_annotation_file).to(self.device)
        super().on_validation_epoch_start()

    def ap_metric(self, ann_file) -> CocoKeypointAP:
        """COCO AP of this set against ``ann_file``: its keypoints taken by name; sets with groups
        (coco_wholebody, sapiens2_308, coco17_feet) also give AP_<group>."""
        return CocoKeypointAP(ann_file, self.metainfo.sigmas, groups=self.metainfo.group_ids,
                              keypoint_names=self.metainfo.keypoint_names)

    def update_metrics(self, outputs: dict, batch: dict) -> None:
        """Keypoints back to image pixels (the inverse crop affine), scored against the annotation file."""
        coords = outputs["coords"]
        affine = batch["inverse_affine"].to(coords.dtype)  # crop px -> image px, (B, 2, 3)
        image_coords = coords @ affine[:, :, :2].transpose(1, 2) + affine[:, None, :, 2]
        self.val_metrics.update(batch["image_id"], image_coords, outputs["scores"], batch["box_score"], batch["area"])

    def panel(self, outputs: dict, batch: dict, i: int) -> tuple[str, np.ndarray]:
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

    def picture(self, result, image: np.ndarray, people: np.ndarray | None) -> tuple[str, np.ndarray]:
        return f"pose ({len(result)} people)", draw.draw_people(image, result, self.metainfo.skeleton)

    def findings(self, result) -> dict:
        """Each person's box ``[x, y, w, h]`` and score, and per keypoint name ``[x, y, score]`` in image pixels."""
        names = self.metainfo.keypoint_names
        return {"people": [{"bbox": [round(float(v), 2) for v in person["bbox"][:4]],
                            "score": round(float(person["score"]), 4),
                            "keypoints": {name: [round(float(x), 2), round(float(y), 2), round(float(s), 4)]
                                          for name, (x, y), s in zip(names, person["points"], person["scores"])}}
                           for person in result]}

    def write_validation_outputs(self, run_dir: Path) -> None:
        """``predictions.json``: COCO keypoint results of the last validation (after rescoring and OKS-NMS)."""
        with open(Path(run_dir) / "predictions.json", "w") as f:
            json.dump(self.val_metrics.results if self.val_metrics is not None else [], f)
