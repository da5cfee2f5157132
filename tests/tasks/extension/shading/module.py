"""Shading: a Sapiens2 dense model predicting the light falling on each pixel (one grey channel, sigmoid), trained
with L1 + gradient L1.

Train: ``shading_loss`` over the valid pixels. Val: MAE, RMSE, % within 0.05; the first validation maps are written
to ``<run_dir>/predictions/`` as ``NAME.npy`` (HxW float16) and ``NAME_shading.png``.
"""

from __future__ import annotations

import numpy as np
import torch

from sapiens2_ft.tasks.shading import draw
from sapiens2_ft.tasks.shading.spec import SHADING
from sapiens2_ft.tasks.shading.inference import ShadingBatch, ShadingInference, ShadingOutputs
from sapiens2_ft.tasks.shading.loss import shading_loss
from sapiens2_ft.tasks.shading.metric import ShadingMetrics
from sapiens2_ft.tasks.base import TaskModule
from sapiens2_ft.tasks.visualize import image_rgb, side_by_side


class ShadingModule(TaskModule):
    """Fine-tune a one-channel ``Sapiens2ForNormalEstimation`` head as an shading regressor (the ``model.*`` keys of
    every task: ``TaskModule``).

    Args:
        gradient_weight: Weight of the L1 of the finite differences (0: L1 only).
    """

    spec = SHADING
    inference_class = ShadingInference

    @classmethod
    def check_options(cls, **options) -> list[str]:
        weight = options.get("gradient_weight", 0.5)
        return super().check_options(**options) + (
            [f"model.gradient_weight: {weight} is negative"] if weight is not None and weight < 0 else [])

    def __init__(self, gradient_weight: float = 0.5, **kwargs):
        super().__init__(**kwargs)
        self.val_metrics = ShadingMetrics()

    def loss_terms(self, outputs: ShadingOutputs, batch: ShadingBatch) -> dict[str, torch.Tensor]:
        return shading_loss(outputs["shading"], batch["shading"], batch["mask"], self.hparams.gradient_weight)

    def update_metrics(self, outputs: ShadingOutputs, batch: ShadingBatch) -> None:
        self.val_metrics.update(outputs["shading"].float(), batch["shading"], batch["mask"])

    def panel(self, outputs: ShadingOutputs, batch: ShadingBatch, i: int) -> tuple[str, np.ndarray]:
        mask = batch["mask"][i].numpy()
        truth = draw.picture(batch["shading"][i, 0].numpy(), mask)
        predicted = draw.picture(outputs["shading"][i, 0].float().numpy(), mask)
        return "shading", side_by_side([image_rgb(batch, i), truth, predicted], ["image", "ground truth", "prediction"])
