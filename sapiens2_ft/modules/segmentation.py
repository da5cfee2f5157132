"""Body-part segmentation: a Sapiens2 segmentation model trained with class-weighted CE + Dice.

Train: logits at the label resolution, cross-entropy (ignore index 255, optional class weights)
plus Dice over the foreground classes. Val: mIoU / mAcc / aAcc from a confusion matrix summed
across processes; a few predicted label maps are written to ``<run_dir>/predictions/``.
"""

from __future__ import annotations

from pathlib import Path

import cv2
import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.utilities import rank_zero_info

from sapiens2_ft.body_parts import SAPIENS2_PART_CLASSES
from sapiens2_ft.losses import segmentation_loss
from sapiens2_ft.metrics import SegmentationMetrics
from sapiens2_ft.models.factory import build_model
from sapiens2_ft.optim import OptimConfig, build_optimizer
from sapiens2_ft.preprocessing import normalize_images

NUM_SAVED_PREDICTIONS = 8


class SegmentationModule(L.LightningModule):
    """Fine-tune ``Sapiens2ForSemanticSegmentation`` on a class set.

    Args:
        pretrained: Hub id (``facebook/sapiens2-seg-0.4b``, ``facebook/sapiens2-pretrain-*``) or a local
            ``save_pretrained`` directory. Unset: random init from ``size``.
        size: Backbone preset when ``pretrained`` is unset: tiny, 0.1b, 0.4b, 0.8b, 1b, 5b.
        head: Head layout override (``Sapiens2HeadConfig`` kwargs); default: the released layout.
        class_names: Class names in label-id order (linked from ``data.class_names``); default: the
            29 Sapiens2 classes. Head rows of a checkpoint are transferred by class name.
        input_size: Network input (H, W) (linked from ``data.input_size``).
        pos_embed_rescale: RoPE coordinate rescale augmentation of pretraining; None = off.
        attn_implementation: ``sdpa`` or ``eager``.
        class_weights: Cross-entropy weight per class (default: uniform).
        ce_weight: Weight of the cross-entropy term.
        dice_weight: Weight of the Dice term.
        ignore_index: Label value that is ignored by loss and metrics.
        optim: Optimiser and schedule.
    """

    monitor = ("val/mIoU", "max")

    def __init__(
        self,
        pretrained: str | None = None,
        size: str | None = "tiny",
        head: dict | None = None,
        class_names: list[str] | None = None,
        input_size: tuple[int, int] = (256, 192),
        pos_embed_rescale: float | None = None,
        attn_implementation: str = "sdpa",
        class_weights: list[float] | None = None,
        ce_weight: float = 1.0,
        dice_weight: float = 1.0,
        ignore_index: int = 255,
        optim: OptimConfig = OptimConfig(),
    ):
        super().__init__()
        self.save_hyperparameters()
        self.optim = OptimConfig(**optim) if isinstance(optim, dict) else optim
        self.class_names = list(class_names or SAPIENS2_PART_CLASSES)
        if class_weights is not None and len(class_weights) != len(self.class_names):
            raise ValueError(f"model.class_weights has {len(class_weights)} values for {len(self.class_names)} classes")
        self.model, self.load_report = build_model(
            "seg", self.class_names, input_size, pretrained=pretrained, size=size, head=head,
            pos_embed_rescale=pos_embed_rescale, attn_implementation=attn_implementation,
        )
        rank_zero_info(str(self.load_report))
        self.model.train()  # from_pretrained returns eval mode; Lightning keeps each module's mode
        weights = torch.tensor(class_weights, dtype=torch.float32) if class_weights is not None else None
        self.register_buffer("class_weights", weights, persistent=False)
        self.val_metrics = SegmentationMetrics(len(self.class_names), ignore_index=ignore_index)
        self._saved: list[tuple[str, torch.Tensor]] = []

    def forward(self, pixel_values: torch.Tensor, size: tuple[int, int] | None = None) -> torch.Tensor:
        logits = self.model(pixel_values).logits
        if size is not None and tuple(logits.shape[-2:]) != tuple(size):
            logits = F.interpolate(logits, size=size, mode="bilinear", align_corners=False)
        return logits

    def _step(self, batch: dict, stage: str) -> tuple[torch.Tensor, torch.Tensor]:
        labels = batch["labels"]
        logits = self(normalize_images(batch["image"]), size=tuple(labels.shape[-2:]))
        terms = segmentation_loss(logits, labels, self.class_weights, self.hparams.ignore_index,
                                  self.hparams.ce_weight, self.hparams.dice_weight)
        self.log_dict({f"{stage}/{k}": v for k, v in terms.items()}, prog_bar=stage == "train",
                      batch_size=len(labels), sync_dist=stage == "val")
        return terms["loss"], logits

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "train")[0]

    def on_validation_epoch_start(self) -> None:
        self.val_metrics.reset()
        self._saved = []

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        _, logits = self._step(batch, "val")
        prediction = logits.argmax(1)
        self.val_metrics.update(prediction, batch["labels"])
        for name, pred in zip(batch["name"], prediction):
            if len(self._saved) < NUM_SAVED_PREDICTIONS:
                self._saved.append((name, pred.to(torch.uint8).cpu()))

    def on_validation_epoch_end(self) -> None:
        metrics = self.val_metrics.compute()
        self.log_dict({f"val/{k}": v for k, v in metrics.items()})

    def write_validation_outputs(self, run_dir: Path) -> None:
        """``predictions/NAME.png``: predicted class ids of the first validation samples."""
        out = Path(run_dir) / "predictions"
        out.mkdir(exist_ok=True)
        for name, pred in self._saved:
            cv2.imwrite(str(out / f"{name}.png"), pred.numpy())

    def configure_optimizers(self):
        total = self.trainer.estimated_stepping_batches
        return build_optimizer(self.model, self.optim, self.model.config.num_hidden_layers, int(total))
