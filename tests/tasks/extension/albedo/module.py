"""Albedo: a Sapiens2 dense model predicting one grey reflectance channel (sigmoid), trained with L1 + gradient L1.

Train: ``albedo_loss`` over the valid pixels. Val: MAE, RMSE, % within 0.05; the first validation maps are written
to ``<run_dir>/predictions/`` as ``NAME.npy`` (HxW float16) and ``NAME_albedo.png``.
"""

from __future__ import annotations

import numpy as np
import torch

from sapiens2_ft.tasks.albedo import draw
from sapiens2_ft.tasks.albedo.inference import AlbedoBatch, AlbedoInference, AlbedoOutputs
from sapiens2_ft.tasks.albedo.loss import albedo_loss
from sapiens2_ft.tasks.albedo.metric import AlbedoMetrics
from sapiens2_ft.tasks.base import TaskModule
from sapiens2_ft.tasks.visualize import image_rgb, side_by_side


class AlbedoModule(TaskModule):
    """Fine-tune a one-channel ``Sapiens2ForNormalEstimation`` head as an albedo regressor (the ``model.*`` keys of
    every task: ``TaskModule``).

    Args:
        gradient_weight: Weight of the L1 of the finite differences (0: L1 only).
    """

    task = "albedo"
    inference_class = AlbedoInference

    @classmethod
    def check_options(cls, **options) -> list[str]:
        weight = options.get("gradient_weight", 0.5)
        return super().check_options(**options) + (
            [f"model.gradient_weight: {weight} is negative"] if weight is not None and weight < 0 else [])

    def __init__(self, gradient_weight: float = 0.5, **kwargs):
        super().__init__(**kwargs)
        self.val_metrics = AlbedoMetrics()

    def loss_terms(self, outputs: AlbedoOutputs, batch: AlbedoBatch) -> dict[str, torch.Tensor]:
        return albedo_loss(outputs["albedo"], batch["albedo"], batch["mask"], self.hparams.gradient_weight)

    def update_metrics(self, outputs: AlbedoOutputs, batch: AlbedoBatch) -> None:
        self.val_metrics.update(outputs["albedo"].float(), batch["albedo"], batch["mask"])

    def panel(self, outputs: AlbedoOutputs, batch: AlbedoBatch, i: int) -> tuple[str, np.ndarray]:
        mask = batch["mask"][i].numpy()
        truth = draw.picture(batch["albedo"][i, 0].numpy(), mask)
        predicted = draw.picture(outputs["albedo"][i, 0].float().numpy(), mask)
        return "albedo", side_by_side([image_rgb(batch, i), truth, predicted], ["image", "ground truth", "prediction"])
