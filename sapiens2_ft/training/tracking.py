"""Experiment tracking: which loggers a run gets, and how wandb decides between online and offline.

Every run writes ``metrics.csv`` (the results page is drawn from it). ``tracking.logger`` adds one
dashboard: ``wandb`` (default), ``tensorboard``, or ``csv`` (nothing more).

wandb never prompts: it runs online when ``WANDB_API_KEY`` is set or a ``wandb login`` key is in
the netrc file, offline otherwise (with the ``wandb sync`` command printed). An explicit
``WANDB_MODE`` (``online``, ``offline``, ``disabled``) is obeyed. An online start that fails within
``WANDB_INIT_TIMEOUT`` seconds (default 60: no network, a bad key) falls back to offline.
"""

from __future__ import annotations

import netrc
import os
import subprocess
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal
from urllib.parse import urlparse

from lightning.fabric.loggers.logger import rank_zero_experiment
from lightning.pytorch.loggers import CSVLogger, Logger, TensorBoardLogger, WandbLogger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.utilities import rank_zero_info

from sapiens2_ft.compat import AppendingCSVWriter, csv_experiment
from sapiens2_ft.training.run_dir import segment_file


@dataclass
class TrackingConfig:
    """Where the run's scalars and image panels go.

    Args:
        logger: ``wandb`` (online when logged in, else offline), ``tensorboard``, or ``csv`` only.
        project: wandb project name.
        name: Run name on the dashboard (default: the run directory's name).
        entity: wandb team or user (default: your default entity).
        tags: wandb tags.
        num_panel_images: Samples drawn in each image panel per validation (0 = no panels).
        data_sheet_samples: Samples of the first training batch drawn in ``data_check.png`` (at most 16; 0 = no
            sheet).
    """

    logger: Literal["wandb", "tensorboard", "csv"] = "wandb"
    project: str = "sapiens2-ft"
    name: str | None = None
    entity: str | None = None
    tags: list[str] = field(default_factory=list)
    num_panel_images: int = 4
    data_sheet_samples: int = 16


class RunCSVLogger(CSVLogger):
    """``<run_dir>/metrics.csv``; a resumed run appends to it, so the file holds the whole history.

    Steps logged between the last checkpoint and a crash appear twice; the later row is the resumed run's. The
    hyperparameters go to ``hparams_file`` (a resumed segment's own: ``hparams.resumeN.yaml``).
    """

    def __init__(self, *args, hparams_file: str = ExperimentWriter.NAME_HPARAMS_FILE, **kwargs):
        super().__init__(*args, **kwargs)
        self.hparams_file = hparams_file

    @property
    @rank_zero_experiment
    def experiment(self) -> ExperimentWriter:
        def create() -> ExperimentWriter:
            Path(self.root_dir).mkdir(parents=True, exist_ok=True)
            writer = AppendingCSVWriter(log_dir=self.log_dir)
            writer.NAME_HPARAMS_FILE = self.hparams_file
            return writer

        return csv_experiment(self, create)


def has_wandb_credentials() -> bool:
    """``WANDB_API_KEY`` is set, or the netrc file holds a key for the wandb host."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname
    path = Path(os.environ.get("NETRC", Path.home() / ".netrc"))
    try:
        return path.is_file() and netrc.netrc(path).authenticators(host) is not None
    except (netrc.NetrcParseError, OSError):
        return False


def wandb_mode() -> str:
    """``online``, ``offline`` or ``disabled``: ``WANDB_MODE`` if set, else online only with credentials."""
    explicit = os.environ.get("WANDB_MODE")
    if explicit:
        return "offline" if explicit == "dryrun" else explicit
    return "online" if has_wandb_credentials() else "offline"


def git_commit(path: Path | None = None) -> str | None:
    """The commit of the code that runs (``+dirty`` with uncommitted changes), None outside git."""
    cwd = path or Path(__file__).resolve().parent
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True,
                                timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return commit + ("+dirty" if dirty else "")


def new_run_id() -> str:
    """A fresh wandb run id (8 lowercase hex characters), chosen up front so checkpoints can carry it."""
    return uuid.uuid4().hex[:8]


def _wandb_logger(config: TrackingConfig, run_dir: Path, run_id: str, mode: str) -> WandbLogger:
    import wandb

    return WandbLogger(project=config.project, name=config.name or run_dir.name, entity=config.entity,
                       tags=config.tags, save_dir=str(run_dir), id=run_id, mode=mode,
                       resume="allow" if mode == "online" else None,
                       settings=wandb.Settings(init_timeout=float(os.environ.get("WANDB_INIT_TIMEOUT", 60))))


def _start_wandb(config: TrackingConfig, run_dir: Path, run_id: str) -> WandbLogger:
    """Start the run now (rank 0), so an online start that fails (no network, a bad key) falls back to
    offline logging instead of stopping the training run; the message says how to upload it later."""
    mode = wandb_mode()
    logger = _wandb_logger(config, run_dir, run_id, mode)
    if mode == "online":
        try:
            logger.experiment  # noqa: B018 (creates the wandb run on rank 0)
        except Exception as err:  # wandb raises several types for network and auth failures
            reason = (str(err).splitlines() or [""])[0]
            rank_zero_info(f"wandb could not start online ({type(err).__name__}: {reason}); logging offline")
            # wandb keeps the failed run's id reserved in this process: the offline run gets a new one
            mode, logger = "offline", _wandb_logger(config, run_dir, new_run_id(), "offline")
    if mode == "offline":
        rank_zero_info(f"wandb is offline; to upload this run later: wandb sync {run_dir / 'wandb'}/offline-run-*"
                       f" (online needs WANDB_API_KEY or `wandb login`)")
    return logger


def build_loggers(config: TrackingConfig, run_dir: Path, run_id: str, segment: int = 0) -> list[Logger]:
    """CSV into ``run_dir`` plus the configured dashboard; ``run_id`` names (or continues) the wandb run; a resumed
    run's ``segment`` (N > 0) keeps its hyperparameters in ``hparams.resumeN.yaml``."""
    hparams = segment_file(ExperimentWriter.NAME_HPARAMS_FILE, segment)
    loggers: list[Logger] = [RunCSVLogger(run_dir, name="", version="", hparams_file=hparams)]
    if config.logger == "tensorboard":
        loggers.append(TensorBoardLogger(run_dir, name="tensorboard", version=""))
    elif config.logger == "wandb":
        loggers.append(_start_wandb(config, run_dir, run_id))
    return loggers


def wandb_run_id(loggers: list[Logger]) -> str | None:
    """The wandb run id of a run's loggers (to store for ``--resume``), None without wandb."""
    for logger in loggers:
        if isinstance(logger, WandbLogger):
            return logger.version
    return None
