"""Multi-task pretraining of one small backbone with a head per task: the demo backbone's recipe.

Sapiens2 is one backbone for many human-centric tasks; the demo backbone in ``assets/`` is the same
idea in miniature. One ``Sapiens2Model`` is shared by the five task models (pose, seg, normal,
pointmap, matting), each built by its own task module with its own loss and metric. A batch holds
synthetic images with every dense target plus one top-down crop of a person from each image: the
backbone runs once on the images for the four dense heads and once on the crops for the pose head.
``python tools/pretrain_demo_backbone.py`` runs it and keeps the backbone (``Sapiens2Model``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import lightning as L
import numpy as np
import torch
from torch import nn

from datamodules.dense.targets import DENSE_TASKS
from datamodules.hparams import as_dataclass, plain_hparams
from datamodules.keypoints.metainfo import load_metainfo
from sapiens2_ft.models.checkpoints import RECORD_KEY
from sapiens2_ft.models.optim import OptimConfig
from sapiens2_ft.models.preprocessing import normalize_images
from sapiens2_ft.tasks.base import check_weight_names, group_panels, training_optimizer
from sapiens2_ft.tasks.matting.module import MattingModule
from sapiens2_ft.tasks.normal.module import NormalModule
from sapiens2_ft.tasks.pointmap.module import PointmapModule
from sapiens2_ft.tasks.pose.metric import CocoKeypointAP
from sapiens2_ft.tasks.pose.module import PoseModule
from sapiens2_ft.tasks.registry import task_spec
from sapiens2_ft.tasks.seg.module import SegmentationModule
# The tasks' losses differ in size (a trained model: pose ~5, seg ~1, normal ~2-4, pointmap ~5, matting ~0.3):
# these weights bring them to a comparable size.
DEFAULT_TASK_WEIGHTS = {"pose": 1.0, "seg": 1.0, "normal": 0.5, "pointmap": 0.25, "matting": 4.0}


def subsample_maps(batch: dict, stride: int) -> dict:
    """Every (B, [C,] H, W) map of a batch sampled at pixels ``stride // 2 + stride * i``; intrinsics follow
    (pixel ``u`` of the full map is ``(u - stride // 2) / stride`` of the sampled one)."""
    h, w = batch["image"].shape[-2:]
    offset = stride // 2
    out = {}
    for key, value in batch.items():
        if torch.is_tensor(value) and value.ndim >= 3 and tuple(value.shape[-2:]) == (h, w):
            out[key] = value[..., offset::stride, offset::stride]
        elif key == "intrinsics":
            K = value.clone()
            K[:, :2, :2] /= stride
            K[:, :2, 2] = (K[:, :2, 2] - offset) / stride
            out[key] = K
        else:
            out[key] = value
    return out


class SharedBackbone(nn.Module):
    """A ``Sapiens2Model`` shared by several task models. Called again with the very same input tensor it
    returns the previous output, so the heads of several tasks on one batch run the backbone once."""

    def __init__(self, backbone: nn.Module):
        super().__init__()
        self.backbone = backbone
        self._last: tuple[torch.Tensor, object] | None = None

    def forward(self, pixel_values: torch.Tensor, **kwargs):
        if self._last is not None and self._last[0] is pixel_values and not kwargs:
            return self._last[1]
        out = self.backbone(pixel_values, **kwargs)
        self._last = (pixel_values, out)
        return out

    def clear(self) -> None:
        self._last = None


def share_backbone(task_model: nn.Module, shared: SharedBackbone) -> None:
    """Replace a transformers task model's own backbone (``.model``) by ``shared`` without registering it
    as its submodule: the multi-task module owns it once (one copy in checkpoints and the optimiser)."""
    del task_model._modules["model"]
    object.__setattr__(task_model, "model", shared)


class MultiTaskModule(L.LightningModule):
    """Pretrain a small Sapiens2 backbone on pose, seg, normal, pointmap and matting at once.

    Args:
        size: Backbone preset (``mini``: hidden 160, 6 blocks, patch 16; see ``sapiens2_ft.models.presets``).
        pretrained: Start the backbone from this directory or hub id instead of random init.
        input_size: Network input (H, W) of the images and of the pose crops (linked from ``data.input_size``).
        keypoints: Keypoint set of the pose head (linked from ``data.keypoints``).
        pose_loss: ``heatmap_ce`` (escapes the all-zero heatmap from random init) or ``mse``.
        sigma: Pose target Gaussian sigma in heatmap pixels.
        attn_implementation: ``sdpa`` or ``eager`` (the recipe's choice: under CPU bf16 autocast the mini
            model's step is about 1.4x faster with eager attention than with SDPA's flash kernel).
        task_weights: Multiplier of each task's loss in the total (``pose``, ``seg``, ``normal``, ``pointmap``,
            ``matting``).
        optim: Optimiser and schedule.
        init_from: Not used by pretraining (``--resume`` continues a pretraining run); set, it is an error.
    """

    task = "multitask"

    def __init__(
        self,
        size: str | None = "mini",
        pretrained: str | None = None,
        input_size: tuple[int, int] = (256, 192),
        keypoints: str = "coco17",
        pose_loss: Literal["mse", "heatmap_ce"] = "heatmap_ce",
        sigma: float = 2.0,
        attn_implementation: Literal["sdpa", "eager"] = "sdpa",
        task_weights: dict[str, float] = dict(DEFAULT_TASK_WEIGHTS),
        optim: OptimConfig = OptimConfig(lr=1e-3, weight_decay=0.05, warmup_steps=200),
        init_from: str | None = None,
    ):
        super().__init__()
        if init_from:
            raise ValueError("--init_from is not supported for multi-task pretraining: --resume continues a run, "
                             "model.pretrained starts the backbone from weights")
        self.save_hyperparameters()
        plain_hparams(self)
        check_weight_names(task_weights, DEFAULT_TASK_WEIGHTS, "model.task_weights")
        self.optim = as_dataclass(OptimConfig, optim)
        self.task_weights = {**DEFAULT_TASK_WEIGHTS, **task_weights}
        self.labels = list(load_metainfo(keypoints).keypoint_names)  # the record a resume is checked against
        self.tasks: nn.ModuleDict | None = None  # built in configure_model, with the shared backbone
        self.backbone: SharedBackbone | None = None
        self._panel_batch: tuple[dict, dict] | None = None
        self._stride = 1  # input pixels per dense-head output pixel

    @property
    def monitor(self) -> tuple[str, str]:
        return task_spec(self.task).monitor

    def task_modules(self) -> nn.ModuleDict:
        """One module per task, each building its own model with its own head. Built outside ``__init__``:
        a LightningModule made while LightningCLI instantiates another would take the outer one's
        hyper-parameters."""
        hp = self.hparams
        common = dict(pretrained=hp.pretrained, size=hp.size, input_size=hp.input_size,
                      attn_implementation=hp.attn_implementation)
        return nn.ModuleDict({
            "pose": PoseModule(**common, keypoints=hp.keypoints, loss=hp.pose_loss, sigma=hp.sigma, loss_weight=1.0,
                               flip_test=False),
            "seg": SegmentationModule(**common),
            "normal": NormalModule(**common),
            "pointmap": PointmapModule(**common),
            "matting": MattingModule(**common),
        })

    def configure_model(self) -> None:
        if self.backbone is not None:
            return
        self.tasks = self.task_modules()
        for name, task in self.tasks.items():
            model, report = task.build()
            if self.backbone is None:
                self.backbone = SharedBackbone(model.model)
            share_backbone(model, self.backbone)
            task.model = model
            task.load_report = report

    def task_batch(self, batch: dict, task: str, stride: int = 1) -> dict:
        """One dense task's view of a multi-task batch: its targets plus the shared image and names, every map
        sampled at the centres of ``stride`` x ``stride`` cells (the heads' own resolution: the losses cost a
        sixteenth of what they cost at full size)."""
        view = {**batch[task], "image": batch["image"], "name": batch["name"]}
        return subsample_maps(view, stride) if stride > 1 else view

    def _losses(self, batch: dict, stage: str) -> tuple[dict[str, torch.Tensor], dict[str, dict]]:
        pose, pose_batch = self.tasks["pose"], batch["pose"]
        run = pose.predict if stage == "train" else pose.infer  # validation: decoded keypoints too
        outputs = {"pose": run(normalize_images(pose_batch["image"]))}
        losses = {"pose": pose.loss_terms(outputs["pose"], pose_batch)["loss"]}
        pixel_values = normalize_images(batch["image"])
        self.tasks["pointmap"].check_focal(self.task_batch(batch, "pointmap"))  # on the full-size intrinsics
        for name in DENSE_TASKS:
            outputs[name] = self.tasks[name].predict(pixel_values)  # at the head's resolution
            stride = batch["image"].shape[-1] // next(iter(outputs[name].values())).shape[-1]
            losses[name] = self.tasks[name].loss_terms(outputs[name], self.task_batch(batch, name, stride))["loss"]
        self._stride = stride
        self.backbone.clear()
        losses["loss"] = sum(self.task_weights[name] * losses[name] for name in self.task_weights)
        return losses, outputs

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        losses, _ = self._losses(batch, "train")
        self.log_dict({f"train/{k}": v for k, v in losses.items()}, prog_bar=True, batch_size=len(batch["image"]))
        return losses["loss"]

    def on_validation_epoch_start(self) -> None:
        pose = self.tasks["pose"]
        if pose.val_metrics is None:
            pose.val_metrics = CocoKeypointAP(self.trainer.datamodule.val_annotation_file, pose.metainfo.sigmas)
        for name in ("pose", *DENSE_TASKS):
            self.tasks[name].val_metrics.to(self.device).reset()

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        losses, outputs = self._losses(batch, "val")
        self.log_dict({f"val/{k}": v for k, v in losses.items()}, batch_size=len(batch["image"]))
        self.tasks["pose"].update_metrics(outputs["pose"], batch["pose"])
        for name in DENSE_TASKS:
            self.tasks[name].update_metrics(outputs[name], self.task_batch(batch, name, self._stride))
        if batch_idx == 0:
            self._panel_batch = (batch, {k: v for k, v in outputs.items() if k != "pose"})

    def on_validation_epoch_end(self) -> None:
        metrics = {f"val/pose_{k}": v for k, v in self.tasks["pose"].val_metrics.compute().items()
                   if k in ("AP", "AP50", "AR")}
        for name in DENSE_TASKS:
            metrics.update({f"val/{name}_{k}": v for k, v in self.tasks[name].val_metrics.compute().items()})
        self.log_dict(metrics)

    def validation_panels(self, count: int) -> dict[str, list[np.ndarray]]:
        """Each dense task's panel of the first validation images."""
        if self._panel_batch is None:
            return {}
        batch, outputs = self._panel_batch

        def sample(values: dict, i: int) -> dict:
            return {k: v[i:i + 1].detach().cpu() if torch.is_tensor(v) else v[i:i + 1] for k, v in values.items()}

        def draw(i: int, name: str) -> tuple[str, np.ndarray]:
            view = self.task_batch(batch, name, self._stride)
            return self.tasks[name].panel(sample(outputs[name], i), sample(view, i), 0)

        return group_panels(draw(i, name) for i in range(min(count, len(batch["image"]))) for name in DENSE_TASKS)

    def write_validation_outputs(self, run_dir: Path) -> None:
        """``predictions.json``: COCO keypoint results of the pose head at the last validation."""
        self.tasks["pose"].write_validation_outputs(run_dir)

    def backbone_model(self) -> nn.Module:
        """The shared ``Sapiens2Model`` (what the demo backbone keeps)."""
        return self.backbone.backbone

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        pose_config = self.tasks["pose"].model.config.to_dict()  # the backbone's config, with the keypoint labels
        checkpoint.setdefault(RECORD_KEY, {}).update({"task": self.task, "model_config": pose_config})

    def configure_optimizers(self):
        return training_optimizer(self, self, self.optim, self.backbone_model().config.num_hidden_layers)
