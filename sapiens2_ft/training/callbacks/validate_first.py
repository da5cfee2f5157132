"""A validation before the first training step (``validate_first: true``): where fine-tuning starts, logged at step
0 beside the later validations (``metrics.csv``, the dashboard, ``results.png``) and kept as ``start_metrics`` in
``summary.json``. A resumed run does not validate its start again."""

from __future__ import annotations

import lightning as L

from sapiens2_ft.compat import validate_in_fit


class ValidateFirst(L.Callback):
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.global_step == 0 and trainer.enable_validation:
            validate_in_fit(trainer)
