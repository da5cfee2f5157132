"""Albedo: the base colour of each surface before lighting, regressed per pixel by a three-channel Sapiens2 dense
head with upstream's albedo loss.

transformers has no albedo class: the model is ``Sapiens2ForNormalEstimation`` with three outputs, whose head is a
plain per-pixel regressor with no activation (its forward returns the raw maps as ``normals``), as upstream's
``AlbedoHead`` is (the same pixel-shuffle layout of the released normal heads, a 1x1 conv to RGB). The export
records the task in ``config.json``, which tells the two apart (``registry.task_of_config``).

Train: raw RGB at the target resolution vs the albedo in [0, 1], ``albedo_loss`` (L1 x2 + gradient x2 +
chromaticity x1) over the mask. Val: MAE, RMSE, PSNR, SSIM and gradient L1 of the raw prediction, as upstream's
evaluator scores it; the first validation maps are written to ``<run_dir>/predictions/`` as ``NAME.npy`` (HxWx3
float16 RGB, clamped to [0, 1], as upstream's demo clamps) and ``NAME_albedo.png``.
"""

from __future__ import annotations

import numpy as np
import torch

from sapiens2_ft.tasks.albedo import draw
from sapiens2_ft.tasks.albedo.inference import AlbedoBatch, AlbedoInference, AlbedoOutputs
from sapiens2_ft.tasks.albedo.loss import albedo_loss
from sapiens2_ft.tasks.albedo.metric import AlbedoMetrics
from sapiens2_ft.tasks.albedo.spec import ALBEDO
from sapiens2_ft.tasks.base import TaskModule
from sapiens2_ft.tasks.visualize import image_rgb, side_by_side

WEIGHTS = ("l1_weight", "grad_weight", "chroma_weight")
GREY = 0.5  # what a new head predicts at step 0 with grey_start


class AlbedoModule(TaskModule):
    """Fine-tune a three-channel ``Sapiens2ForNormalEstimation`` head as an albedo regressor (the ``model.*`` keys
    of every task: ``TaskModule``).

    Args:
        l1_weight: Weight of L1 between the raw prediction and the albedo, summed over R, G, B (upstream 2).
        grad_weight: Weight of half the squared error of x plus that of y finite differences of the raw
            prediction vs the albedo's, summed over R, G, B (upstream 2).
        chroma_weight: Weight of L1 between the chromaticities (each colour divided by R + G + B) of the
            prediction clamped to [0, 1] and of the albedo: colour without brightness (upstream 1).
        grey_start: A new head starts by predicting mid-grey everywhere (its last layer's weights 0, its bias
            0.5), so that its first steps learn colours instead of undoing a random head's raw outputs (about
            +-3 for albedo in [0, 1]: at step 0, PSNR -10 dB where mid-grey scores about 11). False: upstream's
            random initialisation. A loaded head is left as it is.
    """

    spec = ALBEDO
    inference_class = AlbedoInference

    @classmethod
    def check_options(cls, **options) -> list[str]:
        return super().check_options(**options) + [
            f"model.{name}: {options[name]} is negative" for name in WEIGHTS
            if options.get(name) is not None and options[name] < 0]

    def __init__(self, l1_weight: float = 2.0, grad_weight: float = 2.0, chroma_weight: float = 1.0,
                 grey_start: bool = False, **kwargs):
        super().__init__(**kwargs)
        self.val_metrics = AlbedoMetrics()

    def build(self):
        model, report = super().build()
        if self.hparams.grey_start and report.head in ("new", "random"):
            last = model.decode_head.predictor
            torch.nn.init.zeros_(last.weight)
            torch.nn.init.constant_(last.bias, GREY)
            report.notes.append(f"head: starts at mid-grey ({GREY}) everywhere (model.grey_start)")
        return model, report

    def loss_terms(self, outputs: AlbedoOutputs, batch: AlbedoBatch) -> dict[str, torch.Tensor]:
        hp = self.hparams
        return albedo_loss(outputs["albedo"], batch["albedo"], batch["mask"], hp.l1_weight, hp.grad_weight,
                           hp.chroma_weight)

    def update_metrics(self, outputs: AlbedoOutputs, batch: AlbedoBatch) -> None:
        self.val_metrics.update(outputs["albedo"].float(), batch["albedo"], batch["mask"])

    def panel(self, outputs: AlbedoOutputs, batch: AlbedoBatch, i: int) -> tuple[str, np.ndarray]:
        mask = batch["mask"][i].reshape(batch["albedo"].shape[-2:]).numpy()
        truth = draw.picture(batch["albedo"][i].permute(1, 2, 0).numpy(), mask)
        predicted = draw.picture(outputs["albedo"][i].float().permute(1, 2, 0).numpy(), mask)
        return "albedo", side_by_side([image_rgb(batch, i), truth, predicted], ["image", "ground truth", "prediction"])
