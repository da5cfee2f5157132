"""Image matting: a Sapiens2 matting model (sigmoid alpha + foreground) trained with the matting loss set.

Train: alpha L1, composition |aF + (1 - a)B - I|, foreground L1 and Sobel-gradient L1 (optional
Laplacian pyramid) on the predicted alpha and foreground. Composition and foreground terms need a
foreground file; the background is recovered from the image as B = (I - a F) / (1 - a) where
a < 0.99 (``estimate_background``). Val: SAD, MSE, gradient and connectivity errors; the first
validation mattes are written to ``<run_dir>/predictions/`` as ``NAME_alpha.png``,
``NAME_foreground.png`` and ``NAME_composite.png`` (the foreground over a checkerboard).
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from sapiens2_ft.checkpoints import plain_hparams
from sapiens2_ft.losses import matting_loss
from sapiens2_ft.losses.matting import DEFAULT_WEIGHTS, estimate_background
from sapiens2_ft.metrics import MattingMetrics
from sapiens2_ft.models.factory import OUTPUT_CHANNELS
from sapiens2_ft.modules.dense import DenseTaskModule, image_rgb, resize_to, to_png
from sapiens2_ft.models.sharding import ScaleConfig
from sapiens2_ft.optim import OptimConfig
from sapiens2_ft.visualize import gray, matte_composite, side_by_side


class MattingModule(DenseTaskModule):
    """Fine-tune ``Sapiens2ForImageMatting``.

    Args:
        pretrained: Hub id (``facebook/sapiens2-matting-1b``, ``facebook/sapiens2-pretrain-*``) or a local
            ``save_pretrained`` directory. Unset: random init from ``size``.
        init_from: Weights of an earlier fine-tuning run of this task and label set (``.ckpt`` file,
            distributed checkpoint directory or exported directory), loaded whole; the optimiser and
            step start fresh (``--init_from``; to continue a run, use ``--resume``).
        size: Backbone preset when ``pretrained`` is unset: tiny, 0.1b, 0.4b, 0.8b, 1b, 5b.
        head: Head layout override (``Sapiens2HeadConfig`` kwargs); default: the released layout.
        input_size: Network input (H, W) (linked from ``data.input_size``).
        pos_embed_rescale: RoPE coordinate rescale augmentation of pretraining; None = off.
        attn_implementation: ``sdpa`` or ``eager``.
        loss_weights: Weights of ``alpha``, ``composition``, ``foreground``, ``gradient``, ``laplacian``
            (default 1, 1, 1, 1, 0).
        optim: Optimiser and schedule.
        scale: Activation checkpointing and FSDP2 options (``sapiens2_ft.models.sharding.ScaleConfig``).
    """

    task = "matting"
    monitor = ("val/sad", "min")

    def __init__(
        self,
        pretrained: str | None = None,
        init_from: str | None = None,
        size: str | None = "tiny",
        head: dict | None = None,
        input_size: tuple[int, int] = (256, 192),
        pos_embed_rescale: float | None = None,
        attn_implementation: str = "sdpa",
        loss_weights: dict[str, float] = dict(DEFAULT_WEIGHTS),
        optim: OptimConfig = OptimConfig(),
        scale: ScaleConfig = ScaleConfig(),
    ):
        super().__init__(OUTPUT_CHANNELS["matting"], pretrained, size, head, input_size, pos_embed_rescale,
                         attn_implementation, optim, scale, init_from=init_from)
        self.save_hyperparameters()
        plain_hparams(self)
        unknown = set(loss_weights) - set(DEFAULT_WEIGHTS)
        if unknown:
            raise ValueError(f"model.loss_weights: unknown names {sorted(unknown)}; known: {sorted(DEFAULT_WEIGHTS)}")
        self.val_metrics = MattingMetrics()

    def predict(self, pixel_values: torch.Tensor, size: Sequence[int] | None = None) -> dict[str, torch.Tensor]:
        out = self.model(pixel_values)
        # Resizing after the sigmoid keeps values in [0, 1].
        return {"alpha": resize_to(out.alphas, size), "foreground": resize_to(out.foregrounds, size)}

    def loss_terms(self, outputs: dict, batch: dict) -> dict[str, torch.Tensor]:
        image = batch["image"].float() / 255.0
        alpha_gt, fg_gt = batch["alpha"], batch["foreground"]
        return matting_loss(outputs["alpha"], outputs["foreground"], alpha_gt, fg_gt, image,
                            bg=estimate_background(image, alpha_gt, fg_gt), has_foreground=batch["has_foreground"],
                            weights=self.hparams.loss_weights)

    def update_metrics(self, outputs: dict, batch: dict) -> None:
        self.val_metrics.update(outputs["alpha"].float(), batch["alpha"])

    def prediction_files(self, outputs: dict, batch: dict, i: int) -> dict:
        alpha = outputs["alpha"][i, 0].float().cpu()
        foreground = (outputs["foreground"][i].float().cpu().permute(1, 2, 0).numpy() * 255).clip(0, 255)
        composite = matte_composite(foreground, alpha.numpy())
        return {"_alpha.png": to_png(alpha), "_foreground.png": to_png(outputs["foreground"][i]),
                "_composite.png": np.ascontiguousarray(composite[..., ::-1])}

    def panel(self, outputs: dict, batch: dict, i: int) -> tuple[str, np.ndarray]:
        alpha = outputs["alpha"][i, 0].float().numpy()
        foreground = (outputs["foreground"][i].float().permute(1, 2, 0).numpy() * 255).clip(0, 255)
        pictures = [image_rgb(batch, i), gray(batch["alpha"][i, 0].numpy()), gray(alpha),
                    matte_composite(foreground, alpha)]
        return "matting", side_by_side(pictures, ["image", "alpha truth", "alpha predicted", "composite"])
