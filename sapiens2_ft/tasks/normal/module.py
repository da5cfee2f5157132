"""Surface normals: a Sapiens2 normal model trained with cosine + L1 + gradient terms on valid pixels.

Train: raw 3-channel predictions at the target resolution vs camera-space unit normals (x right,
y down, z forward), ``normal_loss`` over the mask. Val: mean / median / RMSE angular error and % of
pixels within 5 / 11.25 / 22.5 / 30 degrees; the first validation normal maps are written to
``<run_dir>/predictions/`` as ``NAME.npy`` (HxWx3 float16, unit) and ``NAME_normal.png`` ((n + 1) / 2 as RGB).
"""

from __future__ import annotations

import numpy as np
import torch

from sapiens2_ft.tasks.base import TaskModule
from sapiens2_ft.tasks.dense_maps import unit_vectors
from sapiens2_ft.tasks.normal import draw
from sapiens2_ft.tasks.normal.inference import NormalBatch, NormalInference, NormalOutputs
from sapiens2_ft.tasks.normal.loss import normal_loss
from sapiens2_ft.tasks.normal.metric import NormalMetrics
from sapiens2_ft.tasks.normal.spec import NORMAL
from sapiens2_ft.tasks.visualize import image_rgb, side_by_side


class NormalModule(TaskModule):
    """Fine-tune ``Sapiens2ForNormalEstimation`` (the ``model.*`` keys of every task: ``TaskModule``).

    Args:
        cos_weight: Weight of 1 - cosine (upstream 10).
        l1_weight: Weight of L1 between the raw prediction and the unit target, summed over the 3 channels
            (upstream 1).
        grad_weight: Weight of the squared error of x plus that of y finite differences of the raw
            prediction vs the target, summed over the 3 channels (upstream 10).
    """

    spec = NORMAL
    inference_class = NormalInference

    def __init__(self, cos_weight: float = 10.0, l1_weight: float = 1.0, grad_weight: float = 10.0, **kwargs):
        super().__init__(**kwargs)
        self.val_metrics = NormalMetrics()

    def loss_terms(self, outputs: NormalOutputs, batch: NormalBatch) -> dict[str, torch.Tensor]:
        hp = self.hparams
        return normal_loss(outputs["normals"], batch["normals"], batch["mask"], hp.cos_weight, hp.l1_weight,
                           hp.grad_weight)

    def update_metrics(self, outputs: NormalOutputs, batch: NormalBatch) -> None:
        self.val_metrics.update(outputs["normals"].float(), batch["normals"], batch["mask"])

    def panel(self, outputs: NormalOutputs, batch: NormalBatch, i: int) -> tuple[str, np.ndarray]:
        mask = batch["mask"][i].squeeze(0).numpy()  # the figure: background pixels have no normal to show
        truth = draw.picture(batch["normals"][i].permute(1, 2, 0).numpy(), mask)
        predicted = draw.picture(unit_vectors(outputs["normals"][i].float(), dim=0).permute(1, 2, 0).numpy(), mask)
        return "normals", side_by_side([image_rgb(batch, i), truth, predicted], ["image", "ground truth", "prediction"])
