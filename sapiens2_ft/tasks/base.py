"""The one base of the task modules, and the contracts it keeps with the tasks and with the training layer.

:class:`TaskModule` owns what every task does the same way: building the model in ``configure_model``
(through the sharding of ``models.sharding``), the ``model.*`` keys every task has (documented once, below),
hyper-parameters as plain data, the checkpoint record, the training and validation loop with its padding filter,
the saved predictions and panels, and the optimiser. What the task does with its model outside training (forward
pass, decoding, files, pictures) is its inference object (``tasks/inference.py``), which the module holds and
validates through. A task module subclasses it, declares only its own arguments (the others pass through
``**kwargs``; the CLI resolves them from this signature), names its inference class, and provides the methods of
:class:`TaskInterface`.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import ClassVar, Iterable, Protocol, Sequence, runtime_checkable

import lightning as L
import numpy as np
import torch
from lightning.pytorch.utilities import rank_zero_info
from torch import nn

from datamodules.hparams import as_dataclass, plain_hparams
from sapiens2_ft.compat import attached_trainer
from sapiens2_ft.models.adapters import LoraOptions, adapt, frozen_storage, storage_summary, trainable_summary
from sapiens2_ft.models.checkpoints import RECORD_KEY, model_record
from sapiens2_ft.models.factory import LoadReport
from sapiens2_ft.models.optim import OptimConfig, build_optimizer
from sapiens2_ft.models.preprocessing import normalize_images
from sapiens2_ft.models.sharding import ScaleConfig, place_model
from sapiens2_ft.problems import ConfigProblems
from sapiens2_ft.tasks.diagnostics import Diagnostics
from sapiens2_ft.tasks.distill import DistillOptions, Teacher, load_teacher, map_distill, option_problems
from sapiens2_ft.tasks.inference import Batch, Files, Outputs, TaskInference, write_arrays
from sapiens2_ft.tasks.spec import TaskSpec
from sapiens2_ft.tasks.visualize import image_rgb

NUM_SAVED_PREDICTIONS = 8  # validation samples whose predictions go to <run_dir>/predictions/
MAX_PANEL_SAMPLES = 8  # validation samples kept for the image panels


@runtime_checkable
class RunModule(Protocol):
    """What the training layer (CLI, callbacks, run summary) uses of a module: every task module has it."""

    task: str  # the task's name (its spec's)
    monitor: tuple[str, str]  # (metric, "max" | "min") of checkpoint selection
    labels: list[str]  # output names a resumed or initialised run must match

    def validation_panels(self, count: int) -> dict[str, list[np.ndarray]]:
        """Panel name -> RGB pictures of the first ``count`` samples of the latest validation."""

    def write_validation_outputs(self, run_dir: Path) -> None:
        """Write the latest validation's outputs into the run directory."""

    def validation_diagnostics(self) -> Diagnostics:
        """Tables and pictures behind the latest validation's metrics."""


@runtime_checkable
class TaskInterface(Protocol):
    """What a task provides to :class:`TaskModule`, which runs the loop around it (in the spirit of torchtune's
    recipe interfaces): its inference object (the forward pass and decoding the loop calls, the files it saves)
    and the training side. ``outputs`` are the inference object's (``predict`` / ``infer``); each task declares its
    batch and outputs as TypedDicts beside its inference class (``PoseBatch``, ``SegOutputs``, ...)."""

    inference: TaskInference

    def build(self) -> tuple[nn.Module, LoadReport]:
        """The transformers model and its load report (the base's builds from the ``model.*`` keys)."""

    def loss_terms(self, outputs: Outputs, batch: Batch) -> dict[str, torch.Tensor]:
        """Unweighted loss terms plus the weighted total ``loss`` (each is logged as ``train/<name>``)."""

    def update_metrics(self, outputs: Outputs, batch: Batch) -> None:
        """Feed ``self.val_metrics`` with a validation batch (repeats already left out)."""

    def panel(self, outputs: Outputs, batch: Batch, i: int) -> tuple[str, np.ndarray]:
        """(panel name, RGB picture) of sample ``i``: its input, target and prediction."""


def first_samples(batch: dict, count: int) -> dict:
    """The first ``count`` samples of a batch dict, tensors detached on the CPU."""
    return {k: v[:count].detach().cpu() if isinstance(v, torch.Tensor) else v[:count] if isinstance(v, list) else v
            for k, v in batch.items()}


def select_samples(batch: dict, keep: torch.Tensor) -> dict:
    """The samples of a batch dict where the boolean ``keep`` is True (tensors and lists of batch length)."""
    n, index = len(keep), keep.nonzero().flatten().tolist()
    return {k: v[keep] if isinstance(v, torch.Tensor) and v.ndim and len(v) == n
            else [v[i] for i in index] if isinstance(v, list) and len(v) == n else v for k, v in batch.items()}


def group_panels(panels: Iterable[tuple[str, np.ndarray]]) -> dict[str, list[np.ndarray]]:
    """(panel name, picture) pairs -> panel name -> its pictures, in order."""
    grouped: dict[str, list[np.ndarray]] = {}
    for name, picture in panels:
        grouped.setdefault(name, []).append(picture)
    return grouped


def weight_name_problems(weights: dict[str, float], known: dict[str, float], key: str = "model.loss_weights") -> list[str]:
    """The problem with weights of unknown names (none: []), naming the config key and the known names."""
    unknown = set(weights or {}) - set(known)
    return [f"{key}: unknown names {sorted(unknown)}; known: {sorted(known)}"] if unknown else []


def training_optimizer(module: L.LightningModule, parameters: nn.Module, optim: OptimConfig, num_layers: int):
    """Lightning's optimiser dict for ``parameters`` over the whole run (``module``'s trainer's step count)."""
    return build_optimizer(parameters, optim, num_layers, int(module.trainer.estimated_stepping_batches))


def log_gathered(module: L.LightningModule, metrics: dict) -> None:
    """Log metrics that every process computed alike from the states torchmetrics gathered across processes: synced
    with ``max`` (the value itself), so that Lightning neither averages them nor advises ``sync_dist`` on each."""
    module.log_dict(metrics, sync_dist=True, reduce_fx="max")


class TaskModule(L.LightningModule):
    """Base of the task modules (``model.*`` keys every task has).

    Args:
        pretrained: Hub id (``facebook/sapiens2-<task>-<size>`` such as ``facebook/sapiens2-pose-0.4b``, or
            ``facebook/sapiens2-pretrain-*``) or a local ``save_pretrained`` directory. Unset: random init from
            ``size``.
        pretraining_head: Start the head from this task's head saved beside the ``pretrained`` backbone by
            multi-task pretraining (``pretraining_heads.safetensors``, as the demo backbone in ``assets/`` has):
            the way to begin from a trained head when no released task model exists. False: a new head. Ignored
            with ``init_from``, which loads a run's own head.
        init_from: Weights of an earlier fine-tuning run of this task and label set (``.ckpt`` file,
            distributed checkpoint directory or exported directory), loaded whole; the optimiser and
            step start fresh (``--init_from``; to continue a run, use ``--resume``).
        size: Backbone preset when ``pretrained`` is unset: tiny, mini (the demo backbone's), 0.1b, 0.4b, 0.8b, 1b, 5b.
        head: Head layout override (``Sapiens2HeadConfig`` kwargs); default: the released layout (pointmap: with
            the scale branch, whose MLP input is fixed by ``input_size``: a checkpoint trained at another size
            gets a new first MLP layer, reported when loading).
        input_size: Network input (H, W) (linked from ``data.input_size``).
        pos_embed_rescale: RoPE coordinate rescale augmentation of pretraining; None = off.
        attn_implementation: ``sdpa`` or ``eager``.
        optim: Optimiser and schedule.
        scale: Activation checkpointing and FSDP2 options (``sapiens2_ft.models.sharding.ScaleConfig``).
        freeze: ``none``, ``backbone`` (train the head only) or ``first_n_blocks`` (the patch embedding and the
            first ``freeze_blocks`` transformer blocks stay as loaded).
        freeze_blocks: How many blocks ``first_n_blocks`` freezes.
        lora: LoRA adapters on the backbone (``sapiens2_ft.models.adapters.LoraOptions``; rank 0: off).
        frozen_dtype: Storage of the frozen layers' weights (with ``freeze`` or ``lora``) in training: ``auto``
            (the autocast dtype of ``trainer.precision``: bfloat16 under bf16-mixed, else float32), ``float32``,
            ``bfloat16`` or ``float16`` (these two need the matching mixed precision). Trained weights stay float32.
        distill: Training with a teacher (``sapiens2_ft.tasks.distill.DistillOptions``; docs/distill.md): its
            outputs on the labelled images and on ``data.unlabeled``'s are a target of the loss.

    A task module passes ``_inference_options``, the arguments of its inference class beyond the input size (pose: its
    keypoint set, flip test, sigma and heatmap output), from its own arguments (private: not a config key).
    """

    spec: ClassVar[TaskSpec]  # the task's spec (``tasks/<task>/spec.py``), set by each subclass
    inference_class: type[TaskInference] | None = None  # its inference object's class (None: multi-task pretraining)
    panel_outputs: tuple[str, ...] | None = None  # outputs kept for the panels (None: all)

    def __init__(
        self,
        pretrained: str | None = None,
        pretraining_head: bool = False,
        init_from: str | None = None,
        size: str | None = "tiny",
        head: dict | None = None,
        input_size: tuple[int, int] = (256, 192),
        pos_embed_rescale: float | None = None,
        attn_implementation: str = "sdpa",
        optim: OptimConfig = OptimConfig(),
        scale: ScaleConfig = ScaleConfig(),
        freeze: str = "none",
        freeze_blocks: int = 0,
        lora: LoraOptions = LoraOptions(),
        frozen_dtype: str = "auto",
        distill: DistillOptions = DistillOptions(),
        _inference_options: dict | None = None,
    ):
        super().__init__()
        self.save_hyperparameters(ignore=["_inference_options"])  # the subclass's arguments too
        problems = type(self).check_options(**self.hparams)
        if problems:
            raise ConfigProblems(problems)
        plain_hparams(self)  # checkpoints stay loadable with weights_only=True
        # Lightning's CLI stores nested dataclasses in hparams as dicts: keep the objects here.
        self.optim = as_dataclass(OptimConfig, optim)
        self.scale = as_dataclass(ScaleConfig, scale)
        self.lora = as_dataclass(LoraOptions, lora)
        self.distill = as_dataclass(DistillOptions, distill)
        self.teacher: Teacher | None = None  # loaded when a fit starts (``attach_teacher``)
        self.model: nn.Module | None = None  # built in configure_model, for the trainer's strategy
        # What the task does with its model (forward pass, decoding, files, pictures); it runs this module's model.
        self.inference = (self.inference_class(input_size, **(_inference_options or {})).held_by(self)
                          if self.inference_class is not None else None)
        self.labels: list[str] = list(self.inference.labels if self.inference is not None else self.spec.model.outputs)
        self.load_report: LoadReport | None = None
        self.val_metrics = None  # the task's torchmetrics Metric (pose: made at the first validation)
        self._saved: list[tuple[str, dict[str, np.ndarray]]] = []
        self._panel_samples: tuple[dict, dict] | None = None  # (batch, outputs) of the first validation samples

    @classmethod
    def check_options(cls, **options) -> list[str]:
        """Every problem with these ``model.*`` options, each naming its key (none: []), found without building
        anything, so that a config's mistakes are reported together (``training.cli`` adds the rest of the
        config's). A task that adds options extends it."""
        from sapiens2_ft.models import presets
        from sapiens2_ft.models.adapters import FREEZE_MODES, FROZEN_DTYPES

        problems = []
        if options.get("pretrained") is None and options.get("init_from") is None \
                and options.get("size") not in presets.BACKBONES:
            problems.append(f"model.size: '{options.get('size')}' is not one of {', '.join(presets.BACKBONES)} "
                            f"(model.pretrained is not set)")
        if options.get("pretraining_head") and options.get("pretrained") is None and not options.get("init_from"):
            problems.append("model.pretraining_head: true needs model.pretrained (a backbone saved with its "
                            "pretraining heads); set model.pretraining_head: false for a new head")
        freeze = options.get("freeze", "none")
        if freeze not in FREEZE_MODES:
            problems.append(f"model.freeze: '{freeze}' is not one of {', '.join(FREEZE_MODES)}")
        if freeze == "first_n_blocks" and (options.get("freeze_blocks") or 0) < 1:
            problems.append("model.freeze_blocks: give how many blocks model.freeze: first_n_blocks freezes (>= 1)")
        lora = as_dataclass(LoraOptions, options.get("lora") or {})
        if lora.rank < 0:
            problems.append(f"model.lora.rank: {lora.rank} is negative (0 turns LoRA off)")
        if lora.rank > 0 and freeze not in ("none",):
            problems.append(f"model.freeze: '{freeze}' with model.lora.rank {lora.rank}: LoRA already freezes the "
                            f"backbone's weights; set model.freeze: none")
        unknown = sorted(set(lora.target_modules) - set(LoraOptions().target_modules))
        if lora.rank > 0 and (unknown or not lora.target_modules):
            problems.append(f"model.lora.target_modules: {unknown or '[]'} not among the blocks' linear layers "
                            f"{LoraOptions().target_modules}")
        if options.get("frozen_dtype", "auto") not in FROZEN_DTYPES:
            problems.append(f"model.frozen_dtype: '{options.get('frozen_dtype')}' is not one of "
                            f"{', '.join(FROZEN_DTYPES)}")
        problems += option_problems(as_dataclass(DistillOptions, options.get("distill") or {}),
                                    cls.inference_class is not None)
        size = options.get("input_size") or (256, 192)
        if len(size) != 2 or any(int(v) <= 0 or int(v) % 16 for v in size):
            problems.append(f"data.input_size: {list(size)} must be two positive multiples of the patch size, 16")
        return problems

    @property
    def task(self) -> str:
        """The task's name (its spec's)."""
        return self.spec.name

    @property
    def monitor(self) -> tuple[str, str]:
        return self.spec.training.monitor

    # -- the model ---------------------------------------------------------------------------

    @classmethod
    def options_from_model(cls, directory: Path, config, labels=None) -> dict:
        """Module arguments that run a saved model (an export, a released hub model) as it was trained: those of
        its inference class (``TaskInference.options_from_model``: its label set, what its config records), as
        module arguments. A task whose arguments differ between the two translates them."""
        return cls.inference_class.options_from_model(directory, config, labels)

    def build(self) -> tuple[nn.Module, LoadReport]:
        hp = self.hparams
        return self.inference.build(init_from=hp.init_from, pretraining_head=hp.pretraining_head,
                                    pretrained=hp.pretrained, size=hp.size, head=hp.head,
                                    pos_embed_rescale=hp.pos_embed_rescale, attn_implementation=hp.attn_implementation)

    def empty_model(self, config) -> nn.Module:
        """The architecture of a built model's ``config``, weights not loaded (what FSDP2's other ranks build on the
        meta device before rank 0's weights reach their shards)."""
        return self.spec.model.transformers_class()(config)

    def configure_model(self) -> None:
        """Build and place ``self.model`` once: sharded over the device mesh when the strategy has one."""
        if self.model is not None:
            return
        mesh = self.device_mesh["data_parallel"] if self.device_mesh is not None else None
        trainer = attached_trainer(self)
        device = trainer.strategy.root_device if trainer is not None else None
        hp = self.hparams
        frozen = frozen_storage(hp.frozen_dtype, trainer.precision if trainer is not None else None)
        self.model, report = place_model(self.build, self.empty_model, self.scale, mesh, device,
                                         partial(adapt, freeze=hp.freeze, freeze_blocks=hp.freeze_blocks,
                                                 lora=self.lora, frozen_dtype=frozen))
        if report is not None:
            self.load_report = report
            rank_zero_info(str(report))
        if hp.freeze != "none" or self.lora.rank > 0:
            rank_zero_info(f"model.freeze {hp.freeze}, model.lora.rank {self.lora.rank}: "
                           f"{trainable_summary(self.model)}; stored as {storage_summary(self.model)}")

    # -- the teacher -------------------------------------------------------------------------

    def teacher_labels(self) -> list[str] | str | None:
        """The label set the teacher is loaded with (its rows by these names; None: a task of fixed outputs)."""
        return list(self.labels) if self.spec.model.label_arg else None

    def attach_teacher(self, cpuinfo: str | None = None) -> None:
        """Load ``model.distill.teacher`` beside the model (on its device, sharded over its mesh); at fit start."""
        if self.distill.teacher is None or self.teacher is not None:
            return
        teacher = Teacher(load_teacher(self.distill.teacher, self.inference_class, self.teacher_labels(),
                                       self.hparams.input_size), cpuinfo)
        self.check_teacher(teacher)
        mesh = self.device_mesh["data_parallel"] if self.device_mesh is not None else None
        self.teacher = teacher.place(self.device, mesh)
        rank_zero_info(f"teacher {self.distill.teacher}: {sum(p.numel() for p in teacher.model.parameters()):,} "
                       f"parameters, frozen, {'bf16' if teacher.bf16 else 'float32'}")

    def check_teacher(self, teacher: Teacher) -> None:
        """A ``BadConfig`` when the teacher's outputs cannot be the student's targets (a task adds its checks)."""

    def on_fit_start(self) -> None:
        self.attach_teacher()

    def distill_loss(self, student: Outputs, teacher: Outputs, mask: torch.Tensor | None) -> torch.Tensor:
        """The distillation term of the student's outputs against the teacher's (``tasks.distill``); ``mask``: the
        pixels where the teacher counts (None: all). The base's: L1 to each map (the geometric tasks)."""
        return map_distill(student, teacher, mask)

    def distillation(self, images: torch.Tensor, unlabeled: torch.Tensor | None, batch: Batch
                     ) -> tuple[Outputs, torch.Tensor]:
        """The student's outputs on the labelled ``images`` and the distillation term on them (``on_labeled``) and on
        the ``unlabeled`` ones: one forward pass of each model over both."""
        count, size = len(images), images.shape[-2:]
        both = images if unlabeled is None else torch.cat([images, unlabeled.to(images.device)])
        pixels = normalize_images(both)
        student = self.predict(pixels, size=size)
        first = 0 if self.distill.on_labeled else count
        mask = batch.get("mask")
        if mask is not None and first == 0 and len(both) > count:
            mask = torch.cat([mask.bool(), torch.ones((len(both) - count, *mask.shape[1:]), dtype=torch.bool,
                                                       device=mask.device)])
        mask = mask if first == 0 else None
        if first >= len(both):
            return student, torch.zeros((), device=images.device)
        teacher = self.teacher(pixels[first:], size=size)
        term = self.distill_loss({k: v[first:] for k, v in student.items()}, teacher, mask)
        return {k: v[:count] for k, v in student.items()}, term

    def forward(self, pixel_values: torch.Tensor, size: Sequence[int] | None = None) -> Outputs:
        """Normalised images (B, 3, H, W) -> the task's outputs (``predict``)."""
        return self.predict(pixel_values, size)

    def predict(self, pixel_values: torch.Tensor, size: Sequence[int] | None = None) -> Outputs:
        """The inference object's forward pass: what the loss needs (``TaskInference.predict``)."""
        return self.inference.predict(pixel_values, size)

    def infer(self, pixel_values: torch.Tensor, size: Sequence[int] | None = None) -> Outputs:
        """What validation scores: the inference object's decoded outputs (``TaskInference.infer``)."""
        return self.inference.infer(pixel_values, size)

    def prediction_files(self, outputs: Outputs, batch: Batch, i: int) -> Files:
        """Sample ``i``'s files in ``<run_dir>/predictions/`` (``TaskInference.files``; its pictures keep to the
        batch's ``mask`` where it has one)."""
        mask = batch["mask"][i] if "mask" in batch else None
        return self.inference.files(outputs, i, image_rgb(batch, i), mask)

    # -- the loop ----------------------------------------------------------------------------

    def _step(self, batch: Batch, stage: str) -> tuple[torch.Tensor, Outputs]:
        images = batch["image"]
        if stage == "train" and self.teacher is not None:
            outputs, distilled = self.distillation(images, batch.get("unlabeled"), batch)
            terms = self.loss_terms(outputs, batch)
            terms = {**terms, "labeled": terms["loss"], "distill": distilled,
                     "loss": self.distill.label_weight * terms["loss"] + self.distill.weight * distilled}
        else:
            run = self.predict if stage == "train" else self.infer
            outputs = run(normalize_images(images), size=images.shape[-2:])
            terms = self.loss_terms(outputs, batch)
        self.log_dict({f"{stage}/{k}": v for k, v in terms.items()}, prog_bar=stage == "train",
                      batch_size=len(images), sync_dist=stage == "val")
        return terms["loss"], outputs

    def training_step(self, batch: Batch, batch_idx: int) -> torch.Tensor:
        return self._step(batch, "train")[0]

    def on_validation_epoch_start(self) -> None:
        self.val_metrics.reset()
        self._saved = []

    def validation_step(self, batch: Batch, batch_idx: int) -> None:
        _, outputs = self._step(batch, "val")
        # Repeats that even out the processes' batch counts (loaders.ValShardSampler) are not scored.
        if "padding" in batch and batch["padding"].any():
            keep = ~batch["padding"]
            batch, outputs = select_samples(batch, keep), select_samples(outputs, keep)
        if len(batch["image"]):
            self.update_metrics(outputs, batch)
        for i, name in enumerate(batch.get("name", [])[:NUM_SAVED_PREDICTIONS - len(self._saved)]):
            files = self.prediction_files(outputs, batch, i)
            if files:
                self._saved.append((name, files))
        if batch_idx == 0:
            kept = outputs if self.panel_outputs is None else {k: outputs[k] for k in self.panel_outputs}
            self._panel_samples = (first_samples(batch, MAX_PANEL_SAMPLES), first_samples(kept, MAX_PANEL_SAMPLES))

    def on_validation_epoch_end(self) -> None:
        log_gathered(self, {f"val/{k}": v for k, v in self.val_metrics.compute().items()})

    # -- what a run leaves -------------------------------------------------------------------

    def validation_panels(self, count: int) -> dict[str, list[np.ndarray]]:
        """Panel name -> RGB pictures of the first ``count`` samples of the latest validation."""
        if self._panel_samples is None:
            return {}
        batch, outputs = self._panel_samples
        return group_panels(self.panel(outputs, batch, i) for i in range(min(count, len(batch["image"]))))

    def validation_diagnostics(self) -> Diagnostics:
        """The metric's ``diagnostics()`` of the latest validation (empty before the first)."""
        return self.val_metrics.diagnostics() if self.val_metrics is not None else Diagnostics()

    def write_validation_outputs(self, run_dir: Path) -> None:
        """``predictions/NAME<suffix>`` for the first validation samples of the latest validation."""
        out = Path(run_dir) / "predictions"
        out.mkdir(exist_ok=True)
        for name, files in self._saved:
            write_arrays(out, name, files)

    def on_save_checkpoint(self, checkpoint: dict) -> None:
        record = model_record(self.task, self.model.config, self.lora, self.inference.checkpoint_record())
        checkpoint.setdefault(RECORD_KEY, {}).update(record)

    def configure_optimizers(self):
        return training_optimizer(self, self.model, self.optim, self.model.config.num_hidden_layers)

