"""What the four dense-task modules share: the model, the loop, logging, the optimiser, saved predictions.

A task module (``segmentation``, ``normal``, ``pointmap``, ``matting``) subclasses
:class:`DenseTaskModule` and provides four methods:

- ``predict(pixel_values, size)``: the model's outputs as a dict of tensors at the target ``size``;
- ``loss_terms(outputs, batch)``: unweighted terms plus the weighted ``loss``;
- ``update_metrics(outputs, batch)``: feed ``self.val_metrics``;
- ``prediction_files(outputs, batch, i)``: ``{file suffix: array}`` written for sample ``i`` of the
  first validation batches (``.png`` uint8 maps, ``.npy`` float arrays);
- ``panel(outputs, batch, i)``: ``(panel name, RGB picture)`` of sample ``i`` (input, target, prediction)
  for the dashboards and the run directory's overlays.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Sequence

import cv2
import lightning as L
import numpy as np
import torch
import torch.nn.functional as F

from sapiens2_ft.checkpoints import RECORD_KEY, model_record
from sapiens2_ft.models.factory import build_model
from sapiens2_ft.models.init_from import build_from_run
from sapiens2_ft.models.sharding import ScaleConfig, configure_task_model
from sapiens2_ft.optim import OptimConfig, build_optimizer
from sapiens2_ft.preprocessing import normalize_images

NUM_SAVED_PREDICTIONS = 8
MAX_PANEL_SAMPLES = 8


def first_samples(batch: dict, count: int) -> dict:
    """The first ``count`` samples of a batch dict, tensors detached on the CPU."""
    return {k: v[:count].detach().cpu() if isinstance(v, torch.Tensor) else v[:count] if isinstance(v, list) else v
            for k, v in batch.items()}


def select_samples(batch: dict, keep: torch.Tensor) -> dict:
    """The samples of a batch dict where the boolean ``keep`` is True (tensors and lists of batch length)."""
    n, index = len(keep), keep.nonzero().flatten().tolist()
    return {k: v[keep] if isinstance(v, torch.Tensor) and v.ndim and len(v) == n
            else [v[i] for i in index] if isinstance(v, list) and len(v) == n else v for k, v in batch.items()}


def image_rgb(batch: dict, i: int) -> np.ndarray:
    """Sample ``i``'s uint8 (3, H, W) input image as RGB HxWx3."""
    return batch["image"][i].permute(1, 2, 0).cpu().numpy()


def resize_to(x: torch.Tensor, size: Sequence[int] | None) -> torch.Tensor:
    """Bilinear resize of (B, C, h, w) to ``size`` (H, W) when it differs (tiny heads predict at 1/4)."""
    if size is None or tuple(x.shape[-2:]) == tuple(size):
        return x
    return F.interpolate(x, size=tuple(size), mode="bilinear", align_corners=False)


class DenseTaskModule(L.LightningModule):
    """Base of the dense-task modules; see the module docstring for what a task provides."""

    task: str
    monitor: tuple[str, str]

    def __init__(self, labels: Sequence[str], pretrained: str | None, size: str | None, head: dict | None,
                 input_size: Sequence[int], pos_embed_rescale: float | None, attn_implementation: str,
                 optim: OptimConfig | dict, scale: ScaleConfig | dict, init_from: str | None = None):
        super().__init__()
        # Lightning's CLI stores nested dataclasses in hparams as dicts: keep the objects here.
        self.optim = OptimConfig(**optim) if isinstance(optim, dict) else optim
        self.scale = ScaleConfig(**scale) if isinstance(scale, dict) else scale
        self.labels = list(labels)
        if init_from:
            self._build = partial(build_from_run, init_from, self.task, self.labels, input_size,
                                  pos_embed_rescale=pos_embed_rescale, attn_implementation=attn_implementation)
        else:
            self._build = partial(build_model, self.task, self.labels, input_size, pretrained=pretrained, size=size,
                                  head=head, pos_embed_rescale=pos_embed_rescale,
                                  attn_implementation=attn_implementation)
        self.model: torch.nn.Module | None = None  # built in configure_model, for the trainer's strategy
        self.load_report = None
        self._saved: list[tuple[str, dict[str, np.ndarray]]] = []
        self._panel_samples: tuple[dict, dict] | None = None  # (batch, outputs) of the first validation samples

    def configure_model(self) -> None:
        configure_task_model(self, self._build, self.task, self.scale)

    def forward(self, pixel_values: torch.Tensor, size: Sequence[int] | None = None) -> dict[str, torch.Tensor]:
        """Normalised images (B, 3, H, W) -> the task's output maps at ``size`` (default: as predicted)."""
        return self.predict(pixel_values, size)

    def _step(self, batch: dict, stage: str) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        images = batch["image"]
        outputs = self(normalize_images(images), size=images.shape[-2:])
        terms = self.loss_terms(outputs, batch)
        self.log_dict({f"{stage}/{k}": v for k, v in terms.items()}, prog_bar=stage == "train",
                      batch_size=len(images), sync_dist=stage == "val")
        return terms["loss"], outputs

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "train")[0]

    def on_validation_epoch_start(self) -> None:
        self.val_metrics.reset()
        self._saved = []

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        _, outputs = self._step(batch, "val")
        # Repeats that even out the processes' batch counts (loaders.ValShardSampler) are not scored.
        if "padding" in batch and batch["padding"].any():
            keep = ~batch["padding"]
            batch, outputs = select_samples(batch, keep), select_samples(outputs, keep)
        if len(batch["name"]):
            self.update_metrics(outputs, batch)
        for i, name in enumerate(batch["name"]):
            if len(self._saved) >= NUM_SAVED_PREDICTIONS:
                break
            self._saved.append((name, self.prediction_files(outputs, batch, i)))
        if batch_idx == 0:
            self._panel_samples = (first_samples(batch, MAX_PANEL_SAMPLES), first_samples(outputs, MAX_PANEL_SAMPLES))

    def on_validation_epoch_end(self) -> None:
        self.log_dict({f"val/{k}": v for k, v in self.val_metrics.compute().items()})

    def validation_panels(self, count: int) -> dict[str, list[np.ndarray]]:
        """Panel name -> RGB pictures of the first ``count`` samples of the latest validation."""
        if self._panel_samples is None:
            return {}
        batch, outputs = self._panel_samples
        panels: dict[str, list[np.ndarray]] = {}
        for i in range(min(count, len(batch["image"]))):
            name, picture = self.panel(outputs, batch, i)
            panels.setdefault(name, []).append(picture)
        return panels

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        checkpoint.setdefault(RECORD_KEY, {}).update(model_record(self))

    def write_validation_outputs(self, run_dir: Path) -> None:
        """``predictions/NAME<suffix>`` for the first validation samples of the latest validation."""
        out = Path(run_dir) / "predictions"
        out.mkdir(exist_ok=True)
        for name, files in self._saved:
            for suffix, array in files.items():
                path = out / f"{name}{suffix}"
                if suffix.endswith(".npy"):
                    np.save(path, array)
                else:
                    cv2.imwrite(str(path), array)

    def configure_optimizers(self):
        total = self.trainer.estimated_stepping_batches
        return build_optimizer(self.model, self.optim, self.model.config.num_hidden_layers, int(total))


def to_png(x: torch.Tensor, low: float = 0.0, high: float = 1.0) -> np.ndarray:
    """(C, H, W) or (H, W) values in [low, high] -> uint8 HxW[x3] for cv2 (RGB channels become BGR)."""
    x = ((x.detach().float().cpu() - low) / (high - low)).clamp(0, 1).mul(255).round().to(torch.uint8)
    if x.ndim == 3:
        x = x.permute(1, 2, 0)
        x = x[..., [2, 1, 0]] if x.shape[-1] == 3 else x[..., 0]
    return x.numpy()
