"""Files every run leaves in its run directory: the last validation's outputs and ``summary.json``."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch
from lightning.pytorch.trainer.states import TrainerFn

from datamodules.boundary.writes import write_json
from sapiens2_ft.models.checkpoints import RECORD_KEY
from sapiens2_ft.training.run_dir import CONFIG_FILE, LAST_CHECKPOINT, SUMMARY_FILE, segment_file
from sapiens2_ft.training.tracking import wandb_run_id


def _plain(value):
    if isinstance(value, torch.Tensor):
        return value.item() if value.numel() == 1 else value.tolist()
    return value


class RunArtifacts(L.Callback):
    """Writes the latest validation outputs and, at the end, the run summary (rank 0 only).

    The module provides ``write_validation_outputs(run_dir)`` (pose: ``predictions.json`` in COCO
    results format; dense tasks: a few predicted maps) and ``monitor`` (metric name, mode). A resumed run is segment
    ``segment`` of its run directory: its summary names its recipe file and keeps ``earlier`` (the earlier segments'
    summaries, oldest first) under ``segments``.
    """

    def __init__(self, run_dir: str | Path, segment: int = 0, earlier: list[dict] | None = None):
        self.run_dir = Path(run_dir)
        self.segment, self.earlier = segment, list(earlier or [])
        self.last_validated_step = -1
        self.last_saved_step = -1
        self.replaced = {"train": 0, "val": 0}  # unreadable samples replaced under on_bad_sample: skip
        self.filtered = {"train": 0, "val": 0}  # samples left out by data.filter.* (dense tasks)
        self.drawn: dict[str, int] = {}  # training samples drawn per dataset of a data.train mix (this process)
        self.start_metrics: dict[str, float] = {}  # a validation before the first step (validate_first)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        for counts, key in ((self.replaced, "bad_samples_replaced"), (self.filtered, "filtered_samples")):
            counts["train"] += int(batch[key].sum()) if key in batch else 0
        mix = getattr(getattr(trainer, "datamodule", None), "train_counts", None)
        if mix and "source" in batch:
            per_source = torch.bincount(batch["source"].cpu(), minlength=len(mix)).tolist()
            for count, n in zip(mix, per_source):
                self.drawn[count.name] = self.drawn.get(count.name, 0) + n
                # summed over processes at each epoch's end
                pl_module.log(f"data/samples/{count.name}", float(n), on_step=False, on_epoch=True,
                              reduce_fx="sum", sync_dist=True, batch_size=1)

    def on_validation_batch_end(self, trainer, pl_module, outputs, batch, batch_idx, dataloader_idx=0) -> None:
        for counts, key in ((self.replaced, "bad_samples_replaced"), (self.filtered, "filtered_samples")):
            if not trainer.sanity_checking and key in batch:
                replaced = batch[key]
                if "padding" in batch:  # a repeat of a sample counted where it first came
                    replaced = replaced[~batch["padding"]]
                counts["val"] += int(replaced.sum())

    def state_dict(self) -> dict:
        return {"replaced": dict(self.replaced), "filtered": dict(self.filtered), "drawn": dict(self.drawn),
                "start_metrics": dict(self.start_metrics)}

    def load_state_dict(self, state: dict) -> None:
        self.replaced.update(state.get("replaced", {}))
        self.filtered.update(state.get("filtered", {}))
        self.drawn.update(state.get("drawn", {}))
        self.start_metrics.update(state.get("start_metrics", {}))

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        if trainer.global_step == 0 and trainer.state.fn == TrainerFn.FITTING:  # validate_first: where it starts
            self.start_metrics = val_metrics(trainer)
        self.last_validated_step = trainer.global_step
        if trainer.is_global_zero:
            pl_module.write_validation_outputs(self.run_dir)

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        """The wandb run id travels with the checkpoint, so ``--resume`` continues the same dashboard run; the latest
        validation's metrics too (its step tells whether they are this checkpoint's: the export's model card)."""
        record = checkpoint.setdefault(RECORD_KEY, {})
        record["wandb_run_id"] = wandb_run_id(trainer.loggers)
        if self.last_validated_step >= 0:
            record["validation"] = {"step": self.last_validated_step, "metrics": {
                k.removeprefix("val/"): float(_plain(v)) for k, v in trainer.callback_metrics.items()
                if k.startswith("val/") and torch.as_tensor(v).numel() == 1}}
        self.last_saved_step = trainer.global_step

    def write_summary(self, trainer: L.Trainer, pl_module: L.LightningModule, datamodule, wall_time_s: float,
                      extra: dict | None = None) -> dict:
        checkpoint = trainer.checkpoint_callback  # the best-by-metric one comes first
        metrics = val_metrics(trainer)
        monitor = pl_module.monitor[0]
        last = self.run_dir / LAST_CHECKPOINT
        last = str(last) if last.exists() else None
        best, best_score = ("", None) if checkpoint is None else (
            checkpoint.best_model_path, _plain(checkpoint.best_model_score))
        if not best:  # no validation during fit (a run shorter than val_check_interval): the final weights
            best, best_score = last, metrics.get(monitor.removeprefix("val/"))
        summary = {
            "run_dir": str(self.run_dir),
            "metrics": metrics,
            **({"start_metrics": self.start_metrics} if self.start_metrics else {}),  # validate_first
            "monitor": monitor,
            "best_checkpoint": best,
            "best_score": best_score,
            "last_checkpoint": last,
            "global_step": trainer.global_step,
            "skipped_samples": getattr(datamodule, "skipped", {}),
            # found unreadable while training (all processes; val counts every validation pass)
            "bad_samples_replaced": {split: _sum_over_ranks(trainer, n) for split, n in self.replaced.items()},
            # left out by data.filter.* after augmentation and replaced by the next sample (all processes)
            "filtered_samples": {split: _sum_over_ranks(trainer, n) for split, n in self.filtered.items()},
            # a data.train mix: samples listed, repeat, positions per epoch, and drawn in this run (all processes)
            "train_datasets": {c.name: {"samples": c.samples, "repeat": c.repeat, "per_epoch": c.per_epoch,
                                        "drawn": _sum_over_ranks(trainer, self.drawn.get(c.name, 0))}
                               for c in getattr(datamodule, "train_counts", [])},
            "model": str(getattr(pl_module, "load_report", "")),
            "fit_wall_time_s": round(wall_time_s, 1),
            **(extra or {}),
            "config_file": segment_file(CONFIG_FILE, self.segment),
            **({"segments": self.earlier} if self.earlier else {}),
        }
        if trainer.is_global_zero:
            write_json(self.run_dir, SUMMARY_FILE, summary, indent=2)
        return summary


def val_metrics(trainer: L.Trainer) -> dict:
    """The latest validation's metrics, without the ``val/`` prefix."""
    return {k[len("val/"):]: _plain(v) for k, v in trainer.callback_metrics.items() if k.startswith("val/")}


def _sum_over_ranks(trainer: L.Trainer, count: int) -> int:
    # On the strategy's device: NCCL reduces GPU tensors only.
    return int(trainer.strategy.reduce(torch.tensor(float(count), device=trainer.strategy.root_device),
                                       reduce_op="sum"))
