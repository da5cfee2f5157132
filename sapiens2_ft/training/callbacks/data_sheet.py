"""The first training batch of a run as a data-check sheet: ``<run_dir>/data_check.png`` and the dashboard."""

from __future__ import annotations

from pathlib import Path

import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger
from lightning.pytorch.utilities import rank_zero_warn

from sapiens2_ft.tasks.registry import TASKS
from sapiens2_ft.tasks.sample_sheet import SHEET_FILE, data_sheet, sheet_labels, split_batch, write_sheet

MAX_SHEET_SAMPLES = 16


class DataSheet(L.Callback):
    """Draws up to ``count`` samples of the first batch the run trains on, with their targets (rank 0, once,
    no collectives): ``<run_dir>/data_check.png``, wandb ``train/data_check``, TensorBoard the same. A resumed
    run keeps the sheet of its start. Tasks without a sheet (``TaskSpec.data.draw_sample`` unset), and ``count`` 0,
    draw nothing."""

    def __init__(self, run_dir: str | Path, count: int = MAX_SHEET_SAMPLES):
        if count < 0:
            raise ValueError(f"tracking.data_sheet_samples must be 0 (no sheet) or more, got {count}")
        self.path = Path(run_dir) / SHEET_FILE
        self.count = min(count, MAX_SHEET_SAMPLES)
        self.done = self.count == 0

    def on_train_batch_start(self, trainer: L.Trainer, pl_module: L.LightningModule, batch, batch_idx: int) -> None:
        if self.done:
            return
        self.done = True
        spec = TASKS.get(getattr(pl_module, "task", ""))
        resumed = trainer.global_step > 0 and self.path.exists()
        if not trainer.is_global_zero or spec is None or spec.data.draw_sample is None or resumed:
            return
        try:
            labels = (sheet_labels(trainer.datamodule) if trainer.datamodule is not None
                      else pl_module.inference.sheet_labels())
            sheet = data_sheet(spec.name, split_batch(batch, self.count), labels)
            write_sheet(sheet, self.path)
        except (ValueError, KeyError, OSError) as err:  # a picture is not worth stopping a run for
            rank_zero_warn(f"no data sheet for this run ({type(err).__name__}: {err})")
            return
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                logger.log_image(key="train/data_check", images=[sheet.picture], step=trainer.global_step)
            elif isinstance(logger, TensorBoardLogger):
                logger.experiment.add_image("train/data_check", sheet.picture, trainer.global_step,
                                            dataformats="HWC")
