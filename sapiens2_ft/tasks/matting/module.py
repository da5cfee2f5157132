"""Image matting: a Sapiens2 matting model (sigmoid alpha + foreground) trained with the matting loss set.

Train: alpha L1, composition |aF + (1 - a)B - I|, foreground L1 and Sobel-gradient L1 (optional
Laplacian pyramid) on the predicted alpha and foreground. Composition and foreground terms need a
foreground file; the background is recovered from the image as B = (I - a F) / (1 - a) where
a < 0.99 (``estimate_background``). Val: SAD, MSE, gradient and connectivity errors; the first
validation mattes are written to ``<run_dir>/predictions/`` as ``NAME_alpha.png``,
``NAME_foreground.png`` and ``NAME_composite.png`` (the foreground over a checkerboard).
"""

from __future__ import annotations

import numpy as np
import torch

from sapiens2_ft.tasks.base import TaskModule, weight_name_problems
from sapiens2_ft.tasks.matting import draw
from sapiens2_ft.tasks.matting.inference import MattingBatch, MattingInference, MattingOutputs
from sapiens2_ft.tasks.matting.loss import DEFAULT_WEIGHTS, estimate_background, matting_loss
from sapiens2_ft.tasks.matting.metric import MattingMetrics
from sapiens2_ft.tasks.matting.spec import MATTING
from sapiens2_ft.tasks.visualize import image_rgb, side_by_side


class MattingModule(TaskModule):
    """Fine-tune ``Sapiens2ForImageMatting`` (the ``model.*`` keys of every task: ``TaskModule``).

    Args:
        loss_weights: Weights of ``alpha``, ``composition``, ``foreground``, ``gradient``, ``laplacian``
            (default 1, 1, 1, 1, 0).
    """

    spec = MATTING
    inference_class = MattingInference

    @classmethod
    def check_options(cls, **options) -> list[str]:
        return super().check_options(**options) + weight_name_problems(options.get("loss_weights"), DEFAULT_WEIGHTS)

    def __init__(self, loss_weights: dict[str, float] = dict(DEFAULT_WEIGHTS), **kwargs):
        super().__init__(**kwargs)
        self.val_metrics = MattingMetrics()

    def loss_terms(self, outputs: MattingOutputs, batch: MattingBatch) -> dict[str, torch.Tensor]:
        image = batch["image"].float() / 255.0
        alpha_gt, fg_gt = batch["alpha"], batch["foreground"]
        return matting_loss(outputs["alpha"], outputs["foreground"], alpha_gt, fg_gt, image,
                            bg=estimate_background(image, alpha_gt, fg_gt), has_foreground=batch["has_foreground"],
                            weights=self.hparams.loss_weights)

    def update_metrics(self, outputs: MattingOutputs, batch: MattingBatch) -> None:
        self.val_metrics.update(outputs["alpha"].float(), batch["alpha"])

    def panel(self, outputs: MattingOutputs, batch: MattingBatch, i: int) -> tuple[str, np.ndarray]:
        """The image, cut out by the true and by the predicted alpha, and the predicted foreground cut out."""
        image, alpha = image_rgb(batch, i), outputs["alpha"][i, 0].float().numpy()
        foreground = (outputs["foreground"][i].float().permute(1, 2, 0).numpy() * 255).clip(0, 255)
        pictures = [image, draw.picture(image, batch["alpha"][i, 0].numpy()), draw.picture(image, alpha),
                    draw.picture(foreground, alpha)]
        return "matting", side_by_side(pictures, ["image", "ground truth", "prediction", "predicted foreground"])
