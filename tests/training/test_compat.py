"""Each Lightning / torchmetrics internal that sapiens2_ft.compat relies on, against the installed versions."""

from __future__ import annotations

import csv

import lightning as L
import pytest
import torch
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.demos.boring_classes import BoringDataModule, BoringModel
from lightning.pytorch.loggers import CSVLogger, WandbLogger
from torchmetrics import Metric

from sapiens2_ft import compat
from sapiens2_ft.training.strategies import FSDP2Strategy


def test_attached_trainer():
    module = BoringModel()
    assert compat.attached_trainer(module) is None
    with pytest.raises(RuntimeError):
        module.trainer  # noqa: B018 (the public property refuses; compat answers None)
    trainer = L.Trainer(accelerator="cpu", logger=False, enable_checkpointing=False)
    module.trainer = trainer
    assert compat.attached_trainer(module) is trainer


def test_cli_value(tmp_path):
    cli = LightningCLI(BoringModel, BoringDataModule, run=False, args=["--trainer.max_steps", "3",
                       f"--trainer.default_root_dir={tmp_path}"], save_config_callback=None)
    assert compat.cli_value(cli, cli.config, "trainer")["max_steps"] == 3
    assert compat.cli_value(cli, cli.config_init, "model") is cli.model
    assert compat.cli_value(cli, cli.config, "no_such_key", default=7) == 7


def test_experiment_started_and_csv_experiment(tmp_path):
    wandb = WandbLogger(save_dir=str(tmp_path), offline=True)
    assert not compat.experiment_started(wandb)  # asked without starting a wandb run
    logger = CSVLogger(tmp_path, name="", version="")
    assert not compat.experiment_started(logger)
    made = []
    writer = compat.csv_experiment(logger, lambda: made.append(1) or compat.AppendingCSVWriter(str(tmp_path)))
    assert compat.experiment_started(logger) and logger.experiment is writer
    assert compat.csv_experiment(logger, lambda: made.append(2)) is writer and made == [1]


def test_appending_csv_writer_continues_the_file(tmp_path):
    first = compat.AppendingCSVWriter(str(tmp_path))
    first.log_metrics({"loss": 1.0}, step=0)
    first.save()
    second = compat.AppendingCSVWriter(str(tmp_path))  # Lightning's own writer would delete metrics.csv here
    assert second.metrics_keys == list(csv.DictReader(open(tmp_path / "metrics.csv")).fieldnames)
    second.log_metrics({"loss": 0.5}, step=1)
    second.save()
    rows = list(csv.DictReader(open(tmp_path / "metrics.csv")))
    assert [(r["step"], float(r["loss"])) for r in rows] == [("0", 1.0), ("1", 0.5)]


class _Record(L.Callback):
    def __init__(self):
        self.seen = []

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        self.seen.append(compat.validation_runs_now(trainer))


def test_validation_runs_now(tmp_path):
    record = _Record()
    trainer = L.Trainer(accelerator="cpu", max_steps=6, val_check_interval=3, limit_val_batches=1, logger=False,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        num_sanity_val_steps=0, callbacks=[record], default_root_dir=tmp_path)
    trainer.fit(BoringModel(), datamodule=BoringDataModule())
    assert record.seen == [False, False, True, False, False, True]


class _ValidateAtStart(L.Callback):
    def __init__(self):
        self.validations: list[tuple[int, bool, float]] = []  # (global step, model in train mode after, first weight)

    def on_train_start(self, trainer, pl_module):
        compat.validate_in_fit(trainer)
        self.validations.append((trainer.global_step, pl_module.training, float(pl_module.layer.weight[0, 0])))

    def on_validation_end(self, trainer, pl_module):
        self.validations.append((trainer.global_step, None, float(pl_module.layer.weight[0, 0])))


class _LoggedValidation(BoringModel):
    def validation_step(self, batch, batch_idx):
        loss = self.step(batch)
        self.log("valid_loss", loss)
        return loss


def test_validate_in_fit(tmp_path):
    """A validation from on_train_start: logged at step 0, on the untrained weights, back in training after."""
    record, logger = _ValidateAtStart(), CSVLogger(tmp_path, name="", version="")
    module = _LoggedValidation()
    start = float(module.layer.weight[0, 0])
    trainer = L.Trainer(accelerator="cpu", max_steps=4, val_check_interval=4, limit_val_batches=2, logger=logger,
                        enable_checkpointing=False, enable_progress_bar=False, enable_model_summary=False,
                        num_sanity_val_steps=0, callbacks=[record], default_root_dir=tmp_path, log_every_n_steps=1)
    trainer.fit(module, datamodule=BoringDataModule())
    assert [(step, mode) for step, mode, _ in record.validations] == [(0, None), (0, True), (4, None)]
    assert record.validations[0][2] == start != record.validations[2][2]  # the first on the untrained weights
    with open(tmp_path / "metrics.csv") as f:
        logged = [int(row["step"]) for row in csv.DictReader(f) if row.get("valid_loss")]
    assert logged[0] == 0 and len(logged) == 2 and trainer.global_step == 4


class _EarlyLoader(BoringModel):
    """Asks for the run's step count in configure_optimizers, which builds and iterates the train loader there."""

    def __init__(self):
        super().__init__()
        self.loaders_built = 0

    def train_dataloader(self):
        self.loaders_built += 1
        return super().train_dataloader()

    def configure_optimizers(self):
        assert self.trainer.estimated_stepping_batches == 64
        return super().configure_optimizers()


class _Rebuild(L.Callback):
    def on_fit_start(self, trainer, pl_module):
        assert pl_module.loaders_built == 1 and trainer.train_dataloader is not None
        loader = trainer.train_dataloader
        compat.rebuild_train_loader(trainer)
        assert trainer.train_dataloader is None and getattr(loader, "_iterator", None) is None


def test_rebuild_train_loader(tmp_path):
    module = _EarlyLoader()
    trainer = L.Trainer(accelerator="cpu", max_epochs=1, limit_val_batches=0, logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, enable_model_summary=False, callbacks=[_Rebuild()],
                        default_root_dir=tmp_path)
    trainer.fit(module)
    assert module.loaders_built == 2 and trainer.global_step == 64  # requested again, and a whole epoch trained


def test_set_data_parallel_size():
    strategy = FSDP2Strategy()
    compat.set_data_parallel_size(strategy, 8)
    assert strategy._data_parallel_size == 8  # the attribute ModelParallelStrategy builds its mesh from
    assert "_data_parallel_size" in vars(strategy)


class _ListMetric(compat.SyncPreparation, Metric):
    def __init__(self):
        super().__init__()
        self.add_state("rows", default=[], dist_reduce_fx="cat")
        self.prepared = 0

    def before_sync(self):
        self.prepared += 1
        if not self.rows:
            self.rows = [torch.zeros((0, 2), dtype=torch.float64)]

    def update(self, x):
        self.rows.append(x)

    def compute(self):
        return torch.cat(self.rows) if isinstance(self.rows, list) else self.rows


def test_sync_preparation_runs_before_the_gather():
    metric = _ListMetric()
    gathered = []

    def one_process_gather(tensor, group=None):
        gathered.append(tuple(tensor.shape))
        return [tensor]

    metric.sync(dist_sync_fn=one_process_gather, distributed_available=lambda: True)
    assert metric.prepared == 1
    assert gathered == [(0, 2)]  # the placeholder of before_sync, not torchmetrics' 1-D padding
    metric.unsync()
    assert metric.rows == []  # the local (empty) state is back


def test_only_imports_under():
    import json
    import math
    from argparse import ArgumentError
    from typing import Callable

    from jsonargparse import ArgumentParser

    parser = ArgumentParser(exit_on_error=False)
    parser.add_argument("--fn", type=Callable)
    with compat.only_imports_under(["json"]):
        assert parser.parse_args(["--fn", "json.dumps"]).fn is json.dumps
        with pytest.raises(ArgumentError, match="Importing 'math.sqrt' is not allowed"):
            parser.parse_args(["--fn", "math.sqrt"])
    assert parser.parse_args(["--fn", "math.sqrt"]).fn is math.sqrt  # the policy ends with the block
