"""Weight EMA and early stopping, as the ``ema.*`` and ``early_stopping.*`` keys of a run.

- EMA is Lightning's ``EMAWeightAveraging``: an averaged copy of the module, updated after every optimiser step.
  Validation runs on the averaged weights (so checkpoint selection follows them), checkpoints store them as
  ``state_dict`` (so export and predict use them) and the trained weights beside them, and ``--resume``
  restores both. The copy is not sharded: EMA is for one device or DDP, not FSDP2.
- Early stopping is Lightning's ``EarlyStopping`` on the task's monitored metric; its counters are part of the
  checkpoint, so a resumed run stops where the uninterrupted one would have.
"""

from __future__ import annotations

from dataclasses import dataclass

from lightning.pytorch.callbacks import EarlyStopping, EMAWeightAveraging

from datamodules.errors import BadConfig


@dataclass
class EMAConfig:
    """An exponential moving average of the weights (``ema.*``).

    Args:
        decay: Weight of the running average per update (``avg = decay x avg + (1 - decay) x weights``); null
            turns EMA off. 0.999 averages over about the last 1000 steps.
        start_step: First optimiser step (0-based) whose weights enter the average; before it the average
            follows the weights.
        every_n_steps: Update the average every this many steps.
    """

    decay: float | None = None
    start_step: int = 0
    every_n_steps: int = 1


@dataclass
class EarlyStoppingConfig:
    """Stop when the monitored validation metric (the task's: pose AP, seg mIoU, ...) stops improving
    (``early_stopping.*``).

    Args:
        patience: Validations without an improvement of at least ``min_delta`` before the run stops; null turns
            it off.
        min_delta: The smallest change that counts as an improvement.
    """

    patience: int | None = None
    min_delta: float = 0.0


def ema_callback(config: EMAConfig, strategy) -> EMAWeightAveraging | None:
    if config.decay is None:
        return None
    if not 0.0 < config.decay < 1.0:
        raise BadConfig(f"ema.decay: {config.decay} is not between 0 and 1")
    name = (strategy if isinstance(strategy, str) else type(strategy).__name__).lower()
    if "fsdp" in name or "modelparallel" in name:
        raise BadConfig("ema.decay: the averaged copy of the weights is not sharded; use EMA without FSDP2")
    return EMAWeightAveraging(decay=config.decay, update_starting_at_step=config.start_step,
                              update_every_n_steps=config.every_n_steps)


def early_stopping_callback(config: EarlyStoppingConfig, monitor: str, mode: str) -> EarlyStopping | None:
    if config.patience is None:
        return None
    return EarlyStopping(monitor=monitor, mode=mode, patience=config.patience, min_delta=config.min_delta,
                         check_on_train_epoch_end=False, verbose=True)
