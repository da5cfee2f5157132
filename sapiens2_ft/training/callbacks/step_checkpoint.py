"""``last.ckpt`` every N optimiser steps, so a crash between validations loses at most N steps."""

from __future__ import annotations

from pathlib import Path

import lightning as L
from lightning.pytorch.utilities import rank_zero_info

from sapiens2_ft.compat import validation_runs_now


class StepCheckpoint(L.Callback):
    """Writes the full training state to ``path`` at every ``every_n_steps``-th optimiser step.

    Steps that end in a validation are left to the validation-time checkpoint, which holds that
    validation's results too, so ``last.ckpt`` is not written twice for one step (except with gradient
    accumulation and a ``val_check_interval`` that is not a multiple of it: a validation in the middle
    of an accumulation writes the step again; harmless, only slower). A checkpoint taken
    here resumes at the next batch (see :class:`ResumeDataPosition`).
    """

    def __init__(self, path: str | Path, every_n_steps: int):
        if every_n_steps < 1:
            raise ValueError(f"checkpoint_every_n_steps must be >= 1, got {every_n_steps}")
        self.path = Path(path)
        self.every_n_steps = every_n_steps
        self.saved_step = -1

    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs, batch, batch_idx) -> None:
        step = trainer.global_step
        # With gradient accumulation several batches end on one step: the first of them saves.
        if step == 0 or step % self.every_n_steps or step == self.saved_step or trainer.sanity_checking:
            return
        self.saved_step = step
        # Every rank takes part in a sharded save, so they decide together (a time-based validation
        # interval could differ between ranks).
        if trainer.strategy.broadcast(validation_runs_now(trainer)):
            return
        trainer.save_checkpoint(self.path)
        rank_zero_info(f"step {step}: {self.path.name} written (checkpoint_every_n_steps: {self.every_n_steps})")

