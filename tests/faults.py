"""Test callbacks that inject faults into a training run: a crash, a NaN, a SIGKILL (also mid-checkpoint); one that
records what each training step trained on; a strategy that restores checkpoints late, as FSDP2 does."""

from __future__ import annotations

import io as io_module
import json
import os
import signal
import time
from pathlib import Path

import lightning as L
from lightning.pytorch.strategies import SingleDeviceStrategy


class TrainingCrash(RuntimeError):
    pass


class CrashAtStep(L.Callback):
    """Raises :class:`TrainingCrash` when the optimiser reaches ``step`` (before that step's checkpoint)."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step >= self.step:
            raise TrainingCrash(f"crash injected at step {trainer.global_step}")


class NaNAtStep(L.Callback):
    """Makes the model's output, hence the loss and every gradient, NaN for the batch of optimiser step ``step``."""

    def __init__(self, step: int):
        self.step = step
        self._hook = None

    def on_train_batch_start(self, trainer, pl_module, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            def poison(module, inputs, output):
                for key, value in output.items():
                    output[key] = value * float("nan")
                return output

            self._hook = pl_module.model.register_forward_hook(poison)

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if self._hook is not None:
            self._hook.remove()
            self._hook = None


class KillAtStep(L.Callback):
    """SIGKILLs this process when the optimiser reaches ``step``: no handler, no cleanup, like a lost node."""

    def __init__(self, step: int):
        self.step = step

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step >= self.step:
            os.kill(os.getpid(), signal.SIGKILL)


class ExitOnceAtStep(L.Callback):
    """Rank ``rank`` exits at once (``os._exit(1)``, no cleanup) when the optimiser reaches ``step``, on the first
    attempt of a torchrun job only (``TORCHELASTIC_RESTART_COUNT`` 0): a worker lost once, then restarted."""

    def __init__(self, step: int, rank: int = 1):
        self.step, self.rank = step, rank

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
        if first_attempt and trainer.global_rank == self.rank and trainer.global_step >= self.step:
            os._exit(1)


class KillDuringCheckpointWrite(L.Callback):
    """SIGKILLs this process halfway through writing the checkpoint of optimiser step ``step``."""

    def __init__(self, step: int):
        self.step = step

    def setup(self, trainer, pl_module, stage: str) -> None:
        io = trainer.strategy.checkpoint_io
        write = io._write

        def write_or_die(checkpoint: dict, f) -> None:
            if checkpoint["global_step"] < self.step:
                return write(checkpoint, f)
            buffer = io_module.BytesIO()
            write(checkpoint, buffer)
            f.write(buffer.getvalue()[: len(buffer.getvalue()) // 2])
            f.flush()
            os.kill(os.getpid(), signal.SIGKILL)

        io._write = write_or_die


class PauseAtStep(L.Callback):
    """At optimiser step ``step`` writes ``marker`` and waits (up to 120 s) until ``marker.go`` exists: the test
    sends its signal in between, so the run is signalled at a known step."""

    def __init__(self, step: int, marker: str):
        self.step, self.marker = step, marker

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step != self.step or Path(self.marker).exists():
            return
        Path(self.marker).write_text(str(os.getpid()))
        for _ in range(1200):
            if Path(self.marker + ".go").exists():
                return
            time.sleep(0.1)


class RecordBatches(L.Callback):
    """Appends one JSON line per training batch to ``path``: the optimiser step after it, the epoch, the batch's
    sample indices (``batch["index"]``) and its loss. Lines written before a crash stay."""

    def __init__(self, path: str):
        self.path = path

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps({"step": trainer.global_step, "epoch": trainer.current_epoch,
                                "ids": batch["index"].tolist(), "loss": float(outputs["loss"])}) + "\n")


class RestoreAfterSetup(SingleDeviceStrategy):
    """One CPU process whose checkpoint is restored after the strategy's setup, as under FSDP2: with an epoch-based
    schedule the optimiser's step count builds (and iterates) the train loader before the restore."""

    def __init__(self):
        super().__init__(device="cpu")

    @property
    def restore_checkpoint_after_setup(self) -> bool:
        return True


class RecordWeights(L.Callback):
    """Saves the module's weights after every optimiser step to ``path`` (a list of state dicts) at the end of fit."""

    def __init__(self, path: str):
        self.path, self.weights = path, []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self.weights.append({k: v.detach().clone() for k, v in pl_module.state_dict().items()})

    def on_train_end(self, trainer, pl_module) -> None:
        import torch

        torch.save(self.weights, self.path)
