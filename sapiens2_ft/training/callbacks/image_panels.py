"""Image panels of each validation: sent to the dashboard and written to ``<run_dir>/overlays/``."""

from __future__ import annotations

from pathlib import Path

import lightning as L
from lightning.pytorch.loggers import TensorBoardLogger, WandbLogger

from datamodules.boundary.writes import write_image


class ImagePanels(L.Callback):
    """After every validation (rank 0): the module's ``validation_panels(count)`` pictures, per panel name.

    wandb gets ``val/<panel>`` image lists, TensorBoard one image per sample; the latest pictures are
    also written as ``<run_dir>/overlays/<panel>_<i>.png``, so every run has something to look at.
    """

    def __init__(self, run_dir: str | Path, count: int = 4):
        self.out = Path(run_dir) / "overlays"
        self.count = count

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking or not trainer.is_global_zero or self.count <= 0:
            return
        panels = pl_module.validation_panels(self.count)
        if not panels:
            return
        step = trainer.global_step
        for name, pictures in panels.items():
            for i, picture in enumerate(pictures):
                write_image(self.out, f"{name}_{i}.png", picture[..., ::-1])
            for logger in trainer.loggers:
                if isinstance(logger, WandbLogger):
                    logger.log_image(key=f"val/{name}", images=list(pictures), step=step)
                elif isinstance(logger, TensorBoardLogger):
                    for i, picture in enumerate(pictures):
                        logger.experiment.add_image(f"val/{name}/{i}", picture, step, dataformats="HWC")
