"""Diagnostics of each validation: written to ``<run_dir>/diagnostics/step_<N>/`` and sent to the dashboard."""

from __future__ import annotations

import csv
import io
from pathlib import Path

import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger

from datamodules.boundary.writes import write_image, write_text
from sapiens2_ft.tasks.diagnostics import Diagnostics, Table


def write_diagnostics(out: Path, diagnostics: Diagnostics) -> list[Path]:
    """``out/<table>.csv`` (undefined cells empty) and ``out/<picture>.png`` for each; returns the files."""
    out.mkdir(parents=True, exist_ok=True)
    files = []
    for name, table in diagnostics.tables.items():
        text = io.StringIO(newline="")
        writer = csv.writer(text)
        writer.writerow(table.columns)
        writer.writerows(["" if v is None else v for v in row] for row in table.rows)
        files.append(write_text(out, f"{name}.csv", text.getvalue()))
    for name, picture in diagnostics.images.items():
        files.append(write_image(out, f"{name}.png", picture[..., ::-1]))
    return files


def markdown(table: Table) -> str:
    """The table as markdown (TensorBoard's text plugin renders it)."""
    cell = lambda v: "" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)  # noqa: E731
    lines = ["| " + " | ".join(table.columns) + " |", "|" + "---|" * len(table.columns)]
    return "\n".join(lines + ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.rows])


class ValidationDiagnostics(L.Callback):
    """After every validation (rank 0): the module's ``validation_diagnostics()`` (pose per-keypoint OKS / PCK,
    seg per-class IoU and confusion matrix, dense error histograms) as ``<run_dir>/diagnostics/step_<N>/`` csv
    tables and png pictures; wandb gets ``diagnostics/<name>`` tables (``wandb.Table``) and ``diagnostics/<name>_chart``
    images, TensorBoard the same as markdown text and images. Modules without diagnostics (multi-task
    pretraining) write none."""

    def __init__(self, run_dir: str | Path):
        self.root = Path(run_dir) / "diagnostics"

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        diagnose = getattr(pl_module, "validation_diagnostics", None)
        if trainer.sanity_checking or not trainer.is_global_zero or diagnose is None:
            return
        diagnostics = diagnose()
        if not diagnostics:
            return
        step = trainer.global_step
        write_diagnostics(self.root / f"step_{step}", diagnostics)
        for logger in trainer.loggers:
            if isinstance(logger, WandbLogger):
                for name, table in diagnostics.tables.items():
                    logger.log_table(key=f"diagnostics/{name}", columns=table.columns, data=table.rows, step=step)
                for name, picture in diagnostics.images.items():
                    logger.log_image(key=f"diagnostics/{name}_chart", images=[picture], step=step)
            elif isinstance(logger, TensorBoardLogger):
                for name, table in diagnostics.tables.items():
                    logger.experiment.add_text(f"diagnostics/{name}", markdown(table), step)
                for name, picture in diagnostics.images.items():
                    logger.experiment.add_image(f"diagnostics/{name}_chart", picture, step, dataformats="HWC")
