"""Preemption: on a signal (SLURM's ``--signal``, a scheduler's SIGTERM) write ``last.ckpt`` at the next optimiser
step, stop, and under SLURM requeue the job, so that ``--resume auto`` continues where it stopped.

The handler only notes the signal; the checkpoint is written between two steps, where the training state is whole,
through the run's atomic checkpoint IO (every rank takes part in a sharded save; the ranks agree at each step
whether any of them was signalled). Lightning's own SLURM requeue (``SLURMEnvironment(auto_requeue=True)``) saves
``hpc_ckpt_N.ckpt`` inside the signal handler, mid-step, and restores it on its own; the CLI turns it off when this
callback is on, and requeues with the same ``scontrol requeue`` call after the checkpoint is written.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import lightning as L
from lightning.pytorch.utilities import rank_zero_info

from datamodules.errors import BadConfig, Sapiens2FTError
from sapiens2_ft.compat import validation_runs_now


@dataclass
class PreemptionConfig:
    """What a preemption signal does.

    Args:
        signals: Signals that stop the run at the next optimiser step with ``last.ckpt`` written (names such as
            ``SIGUSR1``, ``SIGTERM``); match SLURM's ``#SBATCH --signal=USR1@120``. ``[]`` leaves signals to
            Lightning (SIGTERM then stops the run at once, without a checkpoint).
        requeue: Under SLURM (``SLURM_JOB_ID`` set), requeue the job (``scontrol requeue``) once ``last.ckpt`` is
            written; with ``#SBATCH --requeue`` it starts again and ``--resume auto`` continues.
        exit_code: The status the run exits with after a preemption stop: 75 (``EX_TEMPFAIL``: not finished,
            try again) is not 0, so ``torchrun --max-restarts`` and schedulers that restart failed jobs start it
            again; SLURM sites can map it with ``RequeueExit``.
    """

    signals: list[str] = field(default_factory=lambda: ["SIGUSR1", "SIGTERM"])
    requeue: bool = True
    exit_code: int = 75


def parse_signals(names: list[str]) -> list[signal.Signals]:
    """``["SIGUSR1", "TERM", ...]`` as signals; a BadConfig naming the bad ones."""
    out, bad = [], []
    for name in names:
        key = str(name).upper()
        key = key if key.startswith("SIG") else f"SIG{key}"
        if key in ("SIGKILL", "SIGSTOP") or not hasattr(signal.Signals, key):
            bad.append(str(name))
        else:
            out.append(signal.Signals[key])
    if bad:
        raise BadConfig(f"preemption.signals: {', '.join(bad)} cannot be handled (give names such as SIGUSR1, "
                        "SIGUSR2, SIGTERM)")
    return out


class Preempted(Exception):
    """The run stopped on a preemption signal after writing its checkpoint."""

    def __init__(self, signal_name: str, step: int, checkpoint: Path):
        super().__init__(f"{signal_name} received: stopped at step {step} with {checkpoint} written")
        self.signal_name, self.step, self.checkpoint = signal_name, step, checkpoint


class RunPreempted(Sapiens2FTError):
    """What training raises once a preempted run has written its checkpoint and said how to continue: the command
    ends with ``exit_code`` (``preemption.exit_code``, 75: a scheduler reruns it)."""

    def __init__(self, message: str, exit_code: int):
        super().__init__(message)
        self.exit_code = exit_code


class PreemptionStop(L.Callback):
    """Notes the configured signals during training; at the next optimiser step every rank writes ``path`` and
    raises :class:`Preempted`. When a validation ends that step, its checkpoint is the one: the run stops before
    the next batch."""

    def __init__(self, path: str | Path, config: PreemptionConfig):
        self.path = Path(path)
        self.signals = parse_signals(config.signals)
        self.received: str | None = None
        self._previous: dict = {}
        self._step = -1
        self._stop_before_next_batch = False

    def _note(self, signum, frame) -> None:
        self.received = self.received or signal.Signals(signum).name

    def on_train_start(self, trainer: L.Trainer, pl_module) -> None:
        # After Lightning registered its own handlers (its SIGTERM one stops the run without a checkpoint).
        self._previous = {s: signal.signal(s, self._note) for s in self.signals}
        self._step = trainer.global_step

    def on_train_batch_end(self, trainer: L.Trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self._step:  # within a gradient accumulation: no step boundary
            return
        self._step = trainer.global_step
        if not trainer.strategy.reduce_boolean_decision(self.received is not None, all=False):
            return
        if trainer.strategy.broadcast(validation_runs_now(trainer)):
            self._stop_before_next_batch = True  # the validation's last.ckpt, with its results
            return
        trainer.save_checkpoint(self.path)
        raise self._preempted(trainer)

    def on_train_batch_start(self, trainer: L.Trainer, pl_module, batch, batch_idx) -> None:
        if self._stop_before_next_batch:
            raise self._preempted(trainer)

    def _preempted(self, trainer: L.Trainer) -> Preempted:
        received = self.received or "a signal on another rank"
        rank_zero_info(f"step {trainer.global_step}: {received}: {self.path} written, stopping")
        return Preempted(received, trainer.global_step, self.path)

    def _restore(self) -> None:
        for s, handler in self._previous.items():
            signal.signal(s, handler)
        self._previous = {}

    def on_train_end(self, trainer, pl_module) -> None:
        self._restore()

    def on_exception(self, trainer, pl_module, exception) -> None:
        self._restore()


def slurm_job_id() -> str | None:
    """The id ``scontrol requeue`` takes: ``ARRAYJOB_TASK`` for an array task, else ``SLURM_JOB_ID``."""
    array_job = os.environ.get("SLURM_ARRAY_JOB_ID")
    job = f"{array_job}_{os.environ['SLURM_ARRAY_TASK_ID']}" if array_job else os.environ.get("SLURM_JOB_ID")
    return job if job and re.fullmatch(r"[0-9_]+", job) else None


def requeue_slurm_job() -> str:
    """``scontrol requeue JOB`` for this SLURM job; returns what happened, for the closing line."""
    job = slurm_job_id()
    if job is None:
        return "not under SLURM: not requeued"
    try:
        done = subprocess.run(["scontrol", "requeue", job], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"scontrol requeue {job} failed ({err}); requeue it by hand"
    if done.returncode != 0:
        return f"scontrol requeue {job} failed ({done.stderr.strip() or done.returncode}); requeue it by hand"
    return f"SLURM job {job} requeued"
