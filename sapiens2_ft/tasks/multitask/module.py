"""Multi-task pretraining of one small backbone with a head per task: the demo backbone's recipe.

Sapiens2 is one backbone for many human-centric tasks; the demo backbone in ``assets/`` is the same
idea in miniature. One ``Sapiens2Model`` is shared by the five task models (pose, seg, normal,
pointmap, matting; ``model.py``), each built by its own task module with its own loss and metric. A batch holds
synthetic images with every dense target plus one top-down crop of a person from each image: the
backbone runs once on the images for the four dense heads and once on the crops for the pose head.
``python tools/pretrain_demo_backbone.py`` runs it and keeps the backbone (``Sapiens2Model``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import numpy as np
import torch
from safetensors.torch import load_file
from torch import nn

from datamodules.body_parts import SAPIENS2_PART_CLASSES
from datamodules.hparams import as_dataclass
from datamodules.keypoints.metainfo import load_metainfo
from sapiens2_ft.models.adapters import LoraOptions
from sapiens2_ft.models.checkpoints import RECORD_KEY
from sapiens2_ft.models.factory import LoadReport, resolve_pretrained
from sapiens2_ft.models.optim import OptimConfig
from sapiens2_ft.models.preprocessing import normalize_images
from sapiens2_ft.models.pretraining_heads import HEADS_FILE
from sapiens2_ft.tasks.base import TaskModule, group_panels, log_gathered, training_optimizer, weight_name_problems
from sapiens2_ft.tasks.matting.module import MattingModule
from sapiens2_ft.tasks.multitask.model import MultiTaskModel
from sapiens2_ft.tasks.multitask.tasks import PRETRAINING_DENSE_TASKS
from sapiens2_ft.tasks.multitask.spec import MULTITASK
from sapiens2_ft.tasks.normal.module import NormalModule
from sapiens2_ft.tasks.pointmap.module import PointmapModule
from sapiens2_ft.tasks.pose.module import PoseModule
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


class MultiTaskModule(TaskModule):
    """Pretrain a small Sapiens2 backbone on pose, seg, normal, pointmap and matting at once.

    Its model is a :class:`~sapiens2_ft.tasks.multitask.model.MultiTaskModel` built, placed and sharded by the
    base like any task's model; each task's own module (kept aside, not a submodule) runs its task model's
    forward pass, loss and metric.

    Args:
        keypoints: Keypoint set of the pose head (linked from ``data.keypoints``).
        pose_loss: ``heatmap_ce`` (escapes the all-zero heatmap from random init) or ``mse``.
        sigma: Pose target Gaussian sigma in heatmap pixels.
        attn_implementation: ``sdpa`` or ``eager`` (the recipe's choice: under CPU bf16 autocast the mini
            model's step is about 1.4x faster with eager attention than with SDPA's flash kernel).
        task_weights: Multiplier of each task's loss in the total (``pose``, ``seg``, ``normal``, ``pointmap``,
            ``matting``).
        size, pretrained, input_size, optim, scale: as every task's (``TaskModule``); ``size`` defaults to
            ``mini``. ``init_from``, ``freeze``, ``lora`` and ``head`` are not for pretraining: set, they are
            errors (``--resume`` continues a pretraining run; ``pretrained`` starts the backbone from weights).
    """

    spec = MULTITASK

    @classmethod
    def check_options(cls, **options) -> list[str]:
        problems = super().check_options(**options)
        if options.get("init_from"):
            problems.append("model.init_from: not for multi-task pretraining (--resume continues a run, "
                            "model.pretrained starts the backbone from weights)")
        if options.get("freeze", "none") != "none" or as_dataclass(LoraOptions, options.get("lora") or {}).rank:
            problems.append("model.freeze / model.lora: multi-task pretraining trains the whole backbone")
        if options.get("head") is not None:
            problems.append("model.head: each task's head takes its layout for model.size (tasks/heads.py)")
        problems += weight_name_problems(options.get("task_weights") or {}, DEFAULT_TASK_WEIGHTS,
                                         "model.task_weights")
        return problems

    def __init__(
        self,
        keypoints: str = "coco17",
        pose_loss: Literal["mse", "heatmap_ce"] = "heatmap_ce",
        sigma: float = 2.0,
        attn_implementation: Literal["sdpa", "eager"] = "sdpa",
        task_weights: dict[str, float] = dict(DEFAULT_TASK_WEIGHTS),
        size: str | None = "mini",
        optim: OptimConfig = OptimConfig(lr=1e-3, weight_decay=0.05, warmup_steps=200),
        **kwargs,
    ):
        super().__init__(size=size, optim=optim, attn_implementation=attn_implementation, **kwargs)
        self.task_weights = {**DEFAULT_TASK_WEIGHTS, **task_weights}
        self.labels = list(load_metainfo(keypoints).keypoint_names)  # the record a resume is checked against
        # One module per task, set in configure_model. A plain dict: their task models are this module's
        # model's submodules, stored once.
        self.task_modules: dict[str, TaskModule] = {}
        self._panel_batch: tuple[dict, dict] | None = None
        self._stride = 1  # input pixels per dense-head output pixel

    @staticmethod
    def head_labels(hparams: dict) -> dict[str, list[str]]:
        """The output rows of the label-set heads of a run with these hyper-parameters, by task (saved beside the
        backbone with its heads, so that a fine-tuning run of another label set takes its rows by name)."""
        return {"pose": list(load_metainfo(hparams.get("keypoints", "coco17")).keypoint_names),
                "seg": list(SAPIENS2_PART_CLASSES)}

    def make_task_modules(self) -> dict[str, TaskModule]:
        """One module per task, each building its own model with its own head. Made outside ``__init__``: a
        LightningModule made while LightningCLI instantiates another would take the outer one's
        hyper-parameters."""
        hp = self.hparams
        common = dict(pretrained=hp.pretrained, size=hp.size, input_size=hp.input_size,
                      attn_implementation=hp.attn_implementation)
        return {
            "pose": PoseModule(**common, keypoints=hp.keypoints, loss=hp.pose_loss, sigma=hp.sigma, loss_weight=1.0,
                               flip_test=False),
            "seg": SegmentationModule(**common),
            "normal": NormalModule(**common),
            "pointmap": PointmapModule(**common),
            "matting": MattingModule(**common),
        }

    def build(self) -> tuple[nn.Module, LoadReport]:
        """The task models around the pose model's backbone (loaded from ``model.pretrained`` or random), with
        the heads saved beside a pretrained backbone when they fit."""
        models, reports = {}, {}
        for name, task in (self.task_modules or self.make_task_modules()).items():
            models[name], reports[name] = task.build()
        model, report = MultiTaskModel(models), reports["pose"]
        heads = Path(resolve_pretrained(self.hparams.pretrained)) / HEADS_FILE if self.hparams.pretrained else None
        if heads is not None and heads.exists():
            report.notes.append(model.load_heads(load_file(heads)))
        return model, report

    def empty_model(self, config) -> nn.Module:
        return MultiTaskModel.from_configs(config)

    def configure_model(self) -> None:
        if self.model is not None:
            return
        self.task_modules = self.make_task_modules()
        super().configure_model()
        for name, task in self.task_modules.items():
            task.model = self.model.tasks[name]
            task.load_report = self.load_report

    def task_batch(self, batch: dict, task: str, stride: int = 1) -> dict:
        """One dense task's view of a multi-task batch: its targets plus the shared image and names, every map
        sampled at the centres of ``stride`` x ``stride`` cells (the heads' own resolution: the losses cost a
        sixteenth of what they cost at full size)."""
        view = {**batch[task], "image": batch["image"], "name": batch["name"]}
        return subsample_maps(view, stride) if stride > 1 else view

    def _losses(self, batch: dict, stage: str) -> tuple[dict[str, torch.Tensor], dict[str, dict]]:
        tasks = self.task_modules
        pose, pose_batch = tasks["pose"], batch["pose"]
        run = pose.predict if stage == "train" else pose.infer  # validation: decoded keypoints too
        tasks["pointmap"].check_focal(self.task_batch(batch, "pointmap"))  # on the full-size intrinsics
        pixel_values = normalize_images(batch["image"])

        def compute() -> dict:  # every head, the backbone once on the crops and once on the images
            outputs = {"pose": run(normalize_images(pose_batch["image"]))}
            for name in PRETRAINING_DENSE_TASKS:
                outputs[name] = tasks[name].predict(pixel_values)  # at the head's resolution
            return outputs

        outputs = self.model(compute)
        losses = {"pose": pose.loss_terms(outputs["pose"], pose_batch)["loss"]}
        for name in PRETRAINING_DENSE_TASKS:
            stride = batch["image"].shape[-1] // next(iter(outputs[name].values())).shape[-1]
            losses[name] = tasks[name].loss_terms(outputs[name], self.task_batch(batch, name, stride))["loss"]
            self._stride = stride
        losses["loss"] = sum(self.task_weights[name] * losses[name] for name in self.task_weights)
        return losses, outputs

    def training_step(self, batch: dict, batch_idx: int) -> torch.Tensor:
        losses, _ = self._losses(batch, "train")
        self.log_dict({f"train/{k}": v for k, v in losses.items()}, prog_bar=True, batch_size=len(batch["image"]))
        return losses["loss"]

    def on_validation_epoch_start(self) -> None:
        pose = self.task_modules["pose"]
        if pose.val_metrics is None:
            pose.val_metrics = pose.ap_metric(self.trainer.datamodule.val_annotation_file)
        for name in ("pose", *PRETRAINING_DENSE_TASKS):
            self.task_modules[name].val_metrics.to(self.device).reset()

    def validation_step(self, batch: dict, batch_idx: int) -> None:
        losses, outputs = self._losses(batch, "val")
        self.log_dict({f"val/{k}": v for k, v in losses.items()}, batch_size=len(batch["image"]), sync_dist=True)
        self.task_modules["pose"].update_metrics(outputs["pose"], batch["pose"])
        for name in PRETRAINING_DENSE_TASKS:
            self.task_modules[name].update_metrics(outputs[name], self.task_batch(batch, name, self._stride))
        if batch_idx == 0:
            self._panel_batch = (batch, {k: v for k, v in outputs.items() if k != "pose"})

    def on_validation_epoch_end(self) -> None:
        metrics = {f"val/pose_{k}": v for k, v in self.task_modules["pose"].val_metrics.compute().items()
                   if k in ("AP", "AP50", "AR")}
        for name in PRETRAINING_DENSE_TASKS:
            metrics.update({f"val/{name}_{k}": v for k, v in self.task_modules[name].val_metrics.compute().items()})
        log_gathered(self, metrics)

    def validation_panels(self, count: int) -> dict[str, list[np.ndarray]]:
        """Each dense task's panel of the first validation images."""
        if self._panel_batch is None:
            return {}
        batch, outputs = self._panel_batch

        def sample(values: dict, i: int) -> dict:
            return {k: v[i:i + 1].detach().cpu() if torch.is_tensor(v) else v[i:i + 1] for k, v in values.items()}

        def draw(i: int, name: str) -> tuple[str, np.ndarray]:
            view = self.task_batch(batch, name, self._stride)
            return self.task_modules[name].panel(sample(outputs[name], i), sample(view, i), 0)

        count = min(count, len(batch["image"]))
        return group_panels(draw(i, name) for i in range(count) for name in PRETRAINING_DENSE_TASKS)

    def write_validation_outputs(self, run_dir: Path) -> None:
        """``predictions.json``: COCO keypoint results of the pose head at the last validation."""
        self.task_modules["pose"].write_validation_outputs(run_dir)

    def backbone_model(self) -> nn.Module:
        """The shared ``Sapiens2Model`` (what the demo backbone keeps)."""
        return self.model.backbone.backbone

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        pose_config = self.model.tasks["pose"].config.to_dict()  # the backbone's config, with the keypoint labels
        checkpoint.setdefault(RECORD_KEY, {}).update({"task": self.task, "model_config": pose_config})

    def configure_optimizers(self):
        return training_optimizer(self, self.model, self.optim, self.model.backbone_config.num_hidden_layers)
