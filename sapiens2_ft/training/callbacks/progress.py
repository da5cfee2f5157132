"""A progress bar over optimiser steps: epoch, step / total, loss, samples/s and time left."""

from __future__ import annotations

import math

from lightning.pytorch.callbacks import TQDMProgressBar


class StepProgressBar(TQDMProgressBar):
    """One training bar for the whole run (Lightning's restarts every epoch), counting optimiser steps.

    Its total is the run's step count, so tqdm's estimate of the time left covers the run; a resumed
    run starts the bar at the restored step.
    """

    def on_train_start(self, trainer, pl_module) -> None:
        super().on_train_start(trainer, pl_module)
        bar = self.train_progress_bar
        total = trainer.estimated_stepping_batches
        bar.total = int(total) if math.isfinite(total) else None  # tqdm takes no inf
        bar.initial = bar.n = trainer.global_step
        bar.unit = "step"
        bar.refresh()

    def on_train_epoch_start(self, trainer, *_) -> None:
        self.train_progress_bar.set_description(f"Epoch {trainer.current_epoch}")

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        bar, step = self.train_progress_bar, trainer.global_step
        if bar is None or bar.disable or not self.is_enabled:
            return
        if step % self.refresh_rate == 0 or step == bar.total:  # Lightning's own refresh rule, on steps
            bar.n = step
            bar.set_postfix(self.get_metrics(trainer, pl_module))  # refreshes

    def get_metrics(self, trainer, pl_module) -> dict:
        metrics = super().get_metrics(trainer, pl_module)
        metrics.pop("v_num", None)
        return metrics
