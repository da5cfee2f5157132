"""Pointmaps: a Sapiens2 pointmap model (canonical XYZ per pixel + a focal scale) trained with the pointmap loss set.

Targets are camera XYZ re-expressed for a canonical camera of focal 768, as upstream: X, Y and Z are
all multiplied by ``scale = 768 / fx`` (see ``datamodules.dense.geometry.canonical_pointmap``); the
scale branch predicts ``scale`` from the image, so metric points are ``canonical / scale`` on all three
axes (as transformers' ``post_process_pointmap_estimation``).
Train: ``pointmap_loss`` on canonical XYZ over valid pixels (L1, multi-scale L1, shift-invariant
L1, SiLog on Z, intrinsics and normal consistency, scale L1). Val, as upstream's evaluator: the canonical
prediction against the canonical ground truth made with the image's own intrinsics (the predicted scale is not
used), reported in metres by the image's own scale: L2 (the checkpoint metric), per-axis MAE, RMSE, % within 5 /
10 / 20 cm, normal angle; ``l2_canonical`` in upstream's canonical units; and ``l2_predicted_focal``, the L2 of
the metric points made with the focal the scale branch predicts (what ``predict`` writes without ``--focal``).
The first validation pointmaps are written to ``<run_dir>/predictions/`` as ``NAME.npy`` (HxWx3 metric XYZ by
the predicted focal, float32) and ``NAME_depth.png`` (turbo colour map of 1 / Z).
"""

from __future__ import annotations

import numpy as np
import torch

from sapiens2_ft.tasks.base import TaskModule, weight_name_problems
from sapiens2_ft.tasks.inference import Files
from sapiens2_ft.tasks.pointmap import draw
from sapiens2_ft.tasks.pointmap.inference import PointmapBatch, PointmapInference, PointmapOutputs, to_metric
from sapiens2_ft.tasks.pointmap.loss import DEFAULT_WEIGHTS, pointmap_loss
from sapiens2_ft.tasks.pointmap.metric import PointmapMetrics
from sapiens2_ft.tasks.pointmap.spec import POINTMAP
from sapiens2_ft.tasks.visualize import image_rgb, side_by_side


class PointmapModule(TaskModule):
    """Fine-tune ``Sapiens2ForPointmapEstimation`` (the ``model.*`` keys of every task: ``TaskModule``; its
    default head has the scale branch).

    Args:
        loss_weights: Weights of ``l1``, ``multiscale_l1``, ``shift_invariant_l1``, ``silog``,
            ``intrinsics``, ``normal``, ``scale`` (default 2, 1, 1, 1, 1, 2, 4).
        canonical_focal: Focal length of the canonical camera of the targets (768, as the data and the
            released models); checked against the first training batch (``scale x fx``).
    """

    spec = POINTMAP
    inference_class = PointmapInference

    @classmethod
    def check_options(cls, **options) -> list[str]:
        return super().check_options(**options) + weight_name_problems(options.get("loss_weights"), DEFAULT_WEIGHTS)

    def __init__(self, loss_weights: dict[str, float] = dict(DEFAULT_WEIGHTS), canonical_focal: float = 768.0,
                 **kwargs):
        super().__init__(**kwargs, _inference_options={"canonical_focal": canonical_focal})
        self.val_metrics = PointmapMetrics()

    def check_focal(self, batch: PointmapBatch) -> None:
        """The data's canonical focal (scale x fx of the image) must be ``canonical_focal``; checked once."""
        if getattr(self, "_focal_checked", False):
            return
        focal = (batch["scale"].double().reshape(-1) * batch["intrinsics"].double()[:, 0, 0]).cpu()
        expected = float(self.hparams.canonical_focal)
        if not torch.allclose(focal, torch.full_like(focal, expected), rtol=1e-3):
            raise ValueError(f"model.canonical_focal is {expected:g} but the data's targets use a canonical focal of "
                             f"{focal.tolist()} (scale x fx); set them equal")
        self._focal_checked = True

    def loss_terms(self, outputs: PointmapOutputs, batch: PointmapBatch) -> dict[str, torch.Tensor]:
        self.check_focal(batch)
        return pointmap_loss(outputs["pointmap"], batch["pointmap"], batch["mask"],
                             pred_scale=outputs.get("scale"), target_scale=batch["scale"],
                             weights=self.hparams.loss_weights, intrinsics=batch["intrinsics"])

    @staticmethod
    def _scaled(outputs: PointmapOutputs, batch: PointmapBatch) -> PointmapOutputs:
        """``outputs`` with the image's own scale (its ground truth) where the head has no scale branch."""
        return outputs if "scale" in outputs or "scale" not in batch else {**outputs, "scale": batch["scale"]}

    def _metric(self, outputs: PointmapOutputs, batch: PointmapBatch) -> torch.Tensor:
        """Metric XYZ by the predicted scale (a head without a scale branch: by the image's own)."""
        return self.inference.metric(self._scaled(outputs, batch))

    def update_metrics(self, outputs: PointmapOutputs, batch: PointmapBatch) -> None:
        """As upstream's evaluator: the canonical prediction against the canonical ground truth (the image's own
        intrinsics), in metres by the image's own scale; the predicted focal's metric points as
        ``l2_predicted_focal``."""
        scale = batch["scale"]
        predicted = self._metric(outputs, batch) if "scale" in outputs else None
        self.val_metrics.update(to_metric(outputs["pointmap"].float(), scale), to_metric(batch["pointmap"], scale),
                                batch["mask"], predicted_focal=predicted, scale=scale.reshape(-1))

    def prediction_files(self, outputs: PointmapOutputs, batch: PointmapBatch, i: int) -> Files:
        """The inference object's files, by the image's own scale where the head has no scale branch."""
        return super().prediction_files(self._scaled(outputs, batch), batch, i)

    def panel(self, outputs: PointmapOutputs, batch: PointmapBatch, i: int) -> tuple[str, np.ndarray]:
        mask = batch["mask"][i].squeeze(0).numpy().astype(bool)
        truth = to_metric(batch["pointmap"][i:i + 1], batch["scale"][i:i + 1])[0, 2].numpy()
        predicted = self._metric(outputs, batch)[i, 2].numpy()
        pictures = [image_rgb(batch, i), draw.picture(truth, mask), draw.picture(predicted, mask)]
        return "depth", side_by_side(pictures, ["image", "ground truth", "prediction"])
