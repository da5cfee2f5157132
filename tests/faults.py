"""A callback for tests that makes a training run fail at a given step, like a crash or a lost node."""

from __future__ import annotations

import lightning as L


class TrainingCrash(RuntimeError):
    pass


class CrashAtStep(L.Callback):
    """Raises :class:`TrainingCrash` when the optimiser reaches ``step`` (before that step's checkpoint)."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step >= self.step:
            raise TrainingCrash(f"crash injected at step {trainer.global_step}")
