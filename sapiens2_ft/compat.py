"""Every use of a Lightning, torchmetrics or jsonargparse internal, one small function each (``tests/test_compat.py`` runs each
against the installed versions; pyproject caps lightning below its next minor release).

Each docstring names the internal it relies on. When an upgrade breaks one, it is fixed here only. This module
imports nothing of this project, so every layer may use it.
"""

from __future__ import annotations

import contextlib
import csv
from typing import Any, Callable, Iterator

import lightning as L
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.loggers import Logger
from lightning.pytorch.loggers.csv_logs import ExperimentWriter
from lightning.pytorch.strategies import ModelParallelStrategy
from torchmetrics.utilities.distributed import gather_all_tensors


def attached_trainer(module: L.LightningModule) -> L.Trainer | None:
    """The trainer ``module`` is attached to, or None (``module.trainer`` raises then).
    Relies on ``LightningModule._trainer``."""
    return module._trainer


def cli_value(cli: LightningCLI, config, key: str, default: Any = None) -> Any:
    """``key`` of a parsed or instantiated config, inside the subcommand's section when there is one.
    Relies on ``LightningCLI._get(config, key, default)``."""
    return cli._get(config, key, default)


def experiment_started(logger: Logger) -> bool:
    """Whether a logger's experiment (the wandb run, the CSV writer) exists, without creating it.
    Relies on ``WandbLogger._experiment`` / ``CSVLogger._experiment`` (None until first used)."""
    return getattr(logger, "_experiment", None) is not None


def csv_experiment(logger: Logger, create: Callable[[], ExperimentWriter]) -> ExperimentWriter:
    """A CSV logger's experiment writer, made by ``create`` on first use and kept.
    Relies on ``CSVLogger._experiment`` being where its ``experiment`` property caches the writer."""
    if logger._experiment is None:
        logger._experiment = create()
    return logger._experiment


class AppendingCSVWriter(ExperimentWriter):
    """Lightning's CSV writer, except that an existing ``metrics.csv`` is continued (its columns first) instead
    of deleted. Relies on ``ExperimentWriter.__init__`` calling ``_check_log_dir_exists()`` (which deletes the
    file) and on its ``_fs``, ``metrics_file_path`` and ``metrics_keys``."""

    def _check_log_dir_exists(self) -> None:
        if self._fs.isfile(self.metrics_file_path):
            with self._fs.open(self.metrics_file_path, "r", newline="") as f:
                self.metrics_keys = list(csv.DictReader(f).fieldnames or [])


def validation_runs_now(trainer: L.Trainer) -> bool:
    """Whether the fit loop validates at the end of the current training batch (asked in
    ``on_train_batch_end``). Relies on ``_TrainingEpochLoop._should_check_val_fx(data_fetcher)`` and
    ``_FitLoop._data_fetcher``."""
    loop = trainer.fit_loop
    return bool(trainer.enable_validation and loop.epoch_loop._should_check_val_fx(loop._data_fetcher))


def validate_in_fit(trainer: L.Trainer) -> None:
    """Run the fit loop's validation now (from ``on_train_start``: a validation before the first step), logged at
    the current step as the loop's own validations are. Relies on ``_TrainingEpochLoop.val_loop.run()`` and the
    state ``_TrainingEpochLoop.on_advance_end`` sets around it (``trainer.validating``, then ``trainer.training``,
    and ``_LoggerConnector._first_loop_iter`` kept)."""
    loop = trainer.fit_loop.epoch_loop
    trainer.validating = True
    first_loop_iter = trainer._logger_connector._first_loop_iter
    loop.val_loop.run()
    trainer.training = True
    trainer._logger_connector._first_loop_iter = first_loop_iter


def rebuild_train_loader(trainer: L.Trainer) -> None:
    """Drop the fit loop's train loader and its iterator, so that fitting requests and iterates a new one.
    Relies on ``_FitLoop.setup_data()`` building the loader only while ``_FitLoop._combined_loader`` is None,
    and on ``_FitLoop._data_fetcher.teardown()`` stopping the old loader's workers."""
    loop = trainer.fit_loop
    if loop._data_fetcher is not None:
        loop._data_fetcher.teardown()
        loop._data_fetcher = None
    loop._combined_loader = None


def set_data_parallel_size(strategy: ModelParallelStrategy, size: int) -> None:
    """Make every one of ``size`` processes one data-parallel (FSDP) rank, before the device mesh is built.
    Relies on ``ModelParallelStrategy._data_parallel_size``, read by its ``setup_environment``."""
    strategy._data_parallel_size = size


class SyncPreparation:
    """Mixin for a torchmetrics ``Metric``: ``before_sync()`` runs right before the states are gathered across
    processes (to give empty list states a placeholder of the right shape, say). Relies on
    ``Metric._sync_dist(dist_sync_fn, process_group)`` being the gathering step of ``Metric.sync``."""

    def before_sync(self) -> None:
        """Called before every gather of the states."""

    def _sync_dist(self, dist_sync_fn: Callable = gather_all_tensors, process_group: Any | None = None) -> None:
        self.before_sync()
        super()._sync_dist(dist_sync_fn, process_group=process_group)


@contextlib.contextmanager
def only_imports_under(allowed: list[str]) -> Iterator[None]:
    """Inside the block jsonargparse imports no path that a parsed value names (a ``class_path``, a function, a
    type) unless it is under one of the dot paths ``allowed``; it checks the string before importing anything,
    and fails the parse. Its import path policy (``set_parsing_settings(import_path_denylist=["*"],
    import_path_allowlist=...)``) can only be extended: the block restores it from
    ``jsonargparse._common.parsing_settings``, so one parse's allowed paths do not reach the next."""
    from jsonargparse import set_parsing_settings
    from jsonargparse._common import parsing_settings

    keys = ("import_path_verdicts", "import_paths_enforced")
    saved = {key: parsing_settings[key] for key in keys}
    set_parsing_settings(import_path_denylist=["*"], import_path_allowlist=list(allowed))
    try:
        yield
    finally:
        parsing_settings.update(saved)
