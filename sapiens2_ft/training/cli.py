"""``python train.py --config pose_demo.yaml [--section.key value ...]``: LightningCLI around the task modules.

- ``--config NAME`` looks NAME up in ``configs/`` (shipped in the package: ``sapiens2_ft/resources.py``) when it is
  not a path; several ``--config`` merge in order; ``--list-configs`` lists them.
- The top-level ``task`` key (pose, seg, normal, pointmap, matting, multitask) picks the LightningModule and
  DataModule of the task registry (``sapiens2_ft/tasks/registry.py``), and its argument links.
- Every run gets a run directory (``--run_dir``, default ``runs/<config>/<timestamp>``) holding the
  resolved ``config.yaml``, ``checkpoints/`` (best by the task's metric, and last), ``metrics.csv`` and
  the dashboard's files (``tracking.*``), the latest validation's predictions (pose ``predictions.json``,
  dense ``predictions/``), image panels (``overlays/``), each validation's ``diagnostics/step_<N>/``, and at
  the end ``results.png``, ``export/``
  (the best checkpoint as a Hugging Face model directory with its model card; ``hub.push_to_hub`` uploads it)
  and ``summary.json``.
- ``--resume auto|PATH`` continues a run (weights, optimiser, schedule, step, wandb run) as a new segment of it,
  which writes its own recipe (``config.resumeN.yaml``) and keeps the earlier segments' summaries in
  ``summary.json``; a finished run is left as it is (``training/run_dir.py``);
  ``--init_from CKPT_OR_DIR`` starts a new run from an earlier run's weights only.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
import warnings
from pathlib import Path
from argparse import ArgumentError
from typing import Optional

import torch
import yaml
from jsonargparse.typing import PositiveInt
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.cli import LightningCLI, SaveConfigCallback
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.plugins.environments import ClusterEnvironment, SLURMEnvironment

from datamodules.boundary.writes import write_json
from datamodules.errors import BadConfig, DataError, NotFound, Refused
from sapiens2_ft.compat import cli_value, experiment_started, only_imports_under
from sapiens2_ft.models.adapters import FROZEN_DTYPES, frozen_storage
from sapiens2_ft.models.checkpoints import CheckpointError, CheckpointInfo, check_compatible, read_info
from sapiens2_ft.models.factory import PretrainedNotFoundError, resolve_pretrained
from sapiens2_ft.exits import console_command
from sapiens2_ft.resources import config_dir, format_config_list
from sapiens2_ft.problems import ConfigProblems
from sapiens2_ft.tasks.registry import DEFAULT_TASK, TASKS, import_class, task_spec
from sapiens2_ft.training.callbacks.data_sheet import DataSheet
from sapiens2_ft.training.callbacks.diagnostics import ValidationDiagnostics
from sapiens2_ft.training.callbacks.ema_stop import (EarlyStoppingConfig, EMAConfig, early_stopping_callback,
                                                     ema_callback)
from sapiens2_ft.training.callbacks.image_panels import ImagePanels
from sapiens2_ft.training.callbacks.non_finite import NonFiniteConfig, NonFiniteGuard
from sapiens2_ft.training.callbacks.preemption import (Preempted, PreemptionConfig, PreemptionStop, RunPreempted,
                                                       requeue_slurm_job)
from sapiens2_ft.training.callbacks.progress import StepProgressBar
from sapiens2_ft.training.callbacks.resume_position import ResumeDataPosition
from sapiens2_ft.training.callbacks.run_artifacts import RunArtifacts
from sapiens2_ft.training.callbacks.step_checkpoint import StepCheckpoint
from sapiens2_ft.training.callbacks.throughput import Throughput
from sapiens2_ft.training.callbacks.validate_first import ValidateFirst
from sapiens2_ft.training.checkpoint_io import (AtomicCheckpointIO, CheckpointSaveError,
                                                agree_on_failed_saves)
from sapiens2_ft.training.config_safety import (check_parsed_recipe, check_recipe_files, import_roots,
                                                load_recipe)
from sapiens2_ft.training.hf_export import export_checkpoint
from sapiens2_ft.training.hub import HubConfig, HubError, hub_access_problems, hub_problems, push_command, push_export
from sapiens2_ft.training.results_page import write_results_png
from sapiens2_ft.training.run_facts import run_facts
from sapiens2_ft.training.run_dir import (CONFIG_FILE, LAST_CHECKPOINT, RUN_DIR_ENV, SUMMARY_FILE, check_fresh,
                                          claim, default_run_dir, earlier_segments, finished_message, next_segment,
                                          reached_end, resolve_resume, resume_hint, run_name, segment_file)
from sapiens2_ft.training.tracking import TrackingConfig, build_loggers, git_commit, new_run_id

CONFIG_DIR = config_dir()  # the checkout's configs/, or the installed package's copy


def resolve_config_args(argv: list[str]) -> list[str]:
    """Rewrite ``--config NAME`` to ``configs/NAME`` when NAME is not an existing path."""
    out = list(argv)
    for i, arg in enumerate(out):
        value, prefix = None, None
        if arg == "--config" and i + 1 < len(out):
            value, index = out[i + 1], i + 1
        elif arg.startswith("--config="):
            value, index, prefix = arg.split("=", 1)[1], i, "--config="
        if value is None or Path(value).exists():
            continue
        for candidate in (CONFIG_DIR / value, CONFIG_DIR / f"{value}.yaml"):
            if candidate.exists():
                out[index] = f"{prefix or ''}{candidate}"
                break
        else:
            known = ", ".join(sorted(p.name for p in CONFIG_DIR.glob("*.yaml")))
            raise NotFound(f"config '{value}' not found (as a path or in {CONFIG_DIR}); configs: {known}")
    return out


def short_help(argv: list[str], prog: str, summary: str, options: list[tuple[tuple[str, ...], dict]]) -> None:
    """``-h`` / ``--help`` of a command that reads a training config (check_data, write_shards): its own ``options``
    (flags, ``add_argument`` keywords) and how the config is given, instead of every key train.py documents (about
    980 lines); argparse's help action prints it and ends the command. Nothing to do without the flag."""
    if not {"-h", "--help"} & set(argv):
        return
    parser = argparse.ArgumentParser(prog=prog, description=summary, formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="Any key of the recipe is given as on train.py's command line (--data.root "
                                            "DIR, --data.keypoints SET, ...): `python train.py --config RECIPE --help` "
                                            "lists every key, docs/configs.md documents them.")
    parser.add_argument("--config", metavar="RECIPE", required=True,
                        help="a recipe of configs/ (pose_custom.yaml, ...) or a YAML file, as train.py takes it; "
                             "repeat it to merge several")
    parser.add_argument("--data.KEY", metavar="VALUE", dest="data_key",
                        help="a data key of the recipe, e.g. --data.root DIR (and any other key of the recipe)")
    for flags, keywords in options:
        parser.add_argument(*flags, **{k: v for k, v in keywords.items() if k != "type"})
    parser.parse_known_args(["--help"])  # argparse's own help: printed, and the command ends (status 0)


def task_of(argv: list[str]) -> str:
    """The ``task`` key of the last config / override that sets it (default ``DEFAULT_TASK``)."""
    task = DEFAULT_TASK
    for i, arg in enumerate(argv):
        config = argv[i + 1] if arg == "--config" and i + 1 < len(argv) else (
            arg.split("=", 1)[1] if arg.startswith("--config=") else None)
        if config is not None:
            task = load_recipe(config).get("task", task)
        elif arg == "--task" and i + 1 < len(argv):
            task = argv[i + 1]
        elif arg.startswith("--task="):
            task = arg.split("=", 1)[1]
    if task not in TASKS:
        raise BadConfig(f"unknown task '{task}'; known: {sorted(TASKS)}")
    return task


def check_config(config, module_class) -> None:
    """Every problem of a parsed config that can be seen before anything is built (``config_problems``), in one
    message (in the spirit of litgpt's ``validate_args``). Types and unknown keys are the parser's (jsonargparse)
    and come before."""
    problems = config_problems(config, module_class)
    if problems:
        raise ConfigProblems(problems)


def config_problems(config, module_class) -> list[str]:
    """The module's options' problems (``TaskModule.check_options``), their fit with the trainer, and the command
    line's own, each naming its key."""
    problems = []
    if config.task != module_class.spec.name:  # task_of's quick read must agree with the parser's
        problems.append(f"task: the config says '{config.task}', but {module_class.__name__} was chosen from the "
                        f"arguments (task_of); give the task once, in a config or as --task")
    if config.resume and config.init_from:
        problems.append("--resume continues a run and --init_from starts a new one: give one of them")
    if config.hub.push_to_hub and not config.export:
        problems.append("hub.push_to_hub uploads the run's export: it needs export: true")
    problems += hub_problems(config.hub.push_to_hub)
    options = config.model.as_dict()
    if hasattr(module_class, "check_options"):  # the task modules (multi-task pretraining checks its own)
        problems += module_class.check_options(**options)
    data = config.get("data")
    if data is not None and data.get("unlabeled") and not (options.get("distill") or {}).get("teacher"):
        problems.append("data.unlabeled: images without labels train only against a teacher: set "
                        "model.distill.teacher (docs/distill.md)")
    trainer = config.trainer
    precision = trainer.precision or default_precision(trainer.accelerator)
    if options.get("frozen_dtype", "auto") in FROZEN_DTYPES:
        try:
            frozen_storage(options.get("frozen_dtype", "auto"), str(precision))
        except ValueError as err:
            problems.append(str(err))
    return problems


LOCAL_START = ("or start from a model on this machine: the shipped demo backbone with its pretrained heads "
               "(--model.pretrained assets/sapiens2-mini-synthetic --model.pretraining_head true; for pose on the CPU "
               "the recipe pose_custom_cpu.yaml, README: Your data)")


def fetch_pretrained(pretrained: str | None, init_from: str | None) -> None:
    """``model.pretrained`` fetched before any work (a hub id: from the local cache, else the Hub), so that a machine
    without it (offline, a gated model without the licence accepted) stops with one message before a run directory,
    a dashboard or a data loader exists, instead of tracebacks from inside the fit. ``init_from`` runs without it."""
    if not pretrained or init_from:
        return
    try:
        resolve_pretrained(str(pretrained))
    except PretrainedNotFoundError as err:
        message = str(err) if str(err).startswith("model.pretrained") else f"model.pretrained: {err}"
        raise err.with_message(f"{message.rstrip('.')}; {LOCAL_START}.") from None


def default_precision(accelerator) -> str:
    """bf16-mixed where the run trains on a GPU, else full fp32. The GPU's bf16 support is not probed:
    that would start CUDA in the launching process, before Lightning forks or starts the ranks."""
    on_gpu = str(accelerator) in ("auto", "gpu", "cuda") and torch.cuda.is_available()
    return "bf16-mixed" if on_gpu else "32-true"


def set_tf32(enabled: bool) -> None:
    """TF32 for float32 matmuls and cuDNN convolutions on NVIDIA GPUs (no effect elsewhere)."""
    if torch.cuda.is_available():
        torch.backends.cuda.matmul.allow_tf32 = enabled
        torch.backends.cudnn.allow_tf32 = enabled


class SaveRecipe(SaveConfigCallback):
    """``<run_dir>/config.yaml``: the resolved recipe without ``run_dir`` and ``resume``, so that
    ``--config <run_dir>/config.yaml`` starts a new run of the same recipe."""

    def __init__(self, parser, config, *args, **kwargs):
        config = config.clone()
        config.run_dir, config.resume = None, None
        super().__init__(parser, config, *args, **kwargs)


class Sapiens2CLI(LightningCLI):
    """Adds the ``task``, ``run_dir``, ``resume``, ``init_from``, ``checkpoint_every_n_steps``, ``export``, ``hub``,
    ``validate_first``, ``tf32``, ``tracking``, ``non_finite``, ``preemption``, ``ema`` and ``early_stopping`` keys,
    the task links, the run directory and the run's callbacks."""

    def __init__(self, task: str, **kwargs):
        self.task = task_spec(task)
        self.resume: CheckpointInfo | None = None
        self.segment = 0  # 0: a new run; N: the Nth resume of its run directory (training/run_dir.py)
        self.earlier: list[dict] = []  # the summaries of the run's earlier segments
        args = kwargs.get("args")
        check_recipe_files(list(sys.argv[1:] if args is None else args))  # before the parser imports what they name
        with only_imports_under(import_roots()):
            training = self.task.training
            super().__init__(import_class(training.module), import_class(training.datamodule), **kwargs)

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_argument("--task", default=DEFAULT_TASK, help=f"Task: {', '.join(TASKS)}")
        parser.add_argument("--run_dir", default=None, help="Run directory (default: runs/<config>/<timestamp>)")
        parser.add_argument("--resume", default=None,
                            help="Continue a run with its full training state: a run dir or checkpoint, or 'auto' "
                                 "(with --run_dir, or inside a torchrun / SLURM job: that run, a fresh one when it "
                                 "has no checkpoint; refused elsewhere). A finished run is left as it is")
        parser.add_argument("--init_from", default=None,
                            help="Start a new run from the weights of an earlier run of the same task and labels "
                                 "(.ckpt, distributed checkpoint dir or exported dir); optimiser and step start at 0")
        parser.add_argument("--checkpoint_every_n_steps", type=Optional[PositiveInt], default=None,
                            help="Also write last.ckpt every N optimiser steps between validations, so a crash "
                                 "loses at most N steps (default: at validations only)")
        parser.add_argument("--export", type=bool, default=True,
                            help="Export the best checkpoint to <run_dir>/export at the end of fit")
        parser.add_class_arguments(HubConfig, "hub")
        parser.add_argument("--validate_first", type=bool, default=False,
                            help="Validate before the first training step: the start beside the end in the curves, "
                                 "the console and summary.json (start_metrics); replaces Lightning's sanity check")
        parser.add_argument("--tf32", type=bool, default=True,
                            help="TF32 matmuls and convolutions for the float32 parts on a GPU (as upstream)")
        parser.add_class_arguments(TrackingConfig, "tracking")
        parser.add_class_arguments(NonFiniteConfig, "non_finite")
        parser.add_class_arguments(PreemptionConfig, "preemption")
        parser.add_class_arguments(EMAConfig, "ema")
        parser.add_class_arguments(EarlyStoppingConfig, "early_stopping")
        parser.link_arguments("init_from", "model.init_from")
        for link in self.task.training.links:
            parser.link_arguments(*link)

    def before_instantiate_classes(self) -> None:
        config = self.config
        check_parsed_recipe(config.as_dict())
        check_config(config, self.model_class)
        name = run_name(config.get("config") or [])
        resumed = resolve_resume(config.resume, config.run_dir, name) if config.resume else None
        if resumed is not None:
            checkpoint, run_dir = resumed
            try:
                self.resume = read_info(checkpoint)
            except CheckpointError as err:
                raise err.with_message(f"--resume: {err}") from None
            trainer = config.trainer
            if (Path(run_dir) / SUMMARY_FILE).exists() and reached_end(
                    self.resume.global_step, self.resume.epochs_completed, trainer.max_steps, trainer.max_epochs):
                raise Refused(finished_message(Path(run_dir), self.resume.global_step, trainer.max_steps,
                                               trainer.max_epochs))
            config.run_dir = str(run_dir)
            os.environ[RUN_DIR_ENV] = str(run_dir)  # ranks started by Lightning's launcher resume the same run
            self.segment, self.earlier = next_segment(Path(run_dir)), earlier_segments(Path(run_dir))
            self.save_config_kwargs = {**self.save_config_kwargs,
                                       "config_filename": segment_file(CONFIG_FILE, self.segment)}
        elif config.resume == "auto":
            print("--resume auto: no earlier run with a last checkpoint; starting a new run")
        if not config.run_dir:
            config.run_dir = str(default_run_dir(name))
        self.run_dir = Path(config.run_dir)
        if self.resume is None:
            check_fresh(self.run_dir)
        hub = hub_access_problems(config.hub.push_to_hub, config.hub.private, later=self.run_dir / "export")
        if hub:  # asked of the Hub before any work (the id's form and a login: check_config)
            raise ConfigProblems(hub)
        fetch_pretrained(config.model.get("pretrained"), config.get("init_from"))
        claim(self.run_dir)
        trainer = config.trainer
        trainer.default_root_dir = str(self.run_dir)
        if trainer.precision is None:
            trainer.precision = default_precision(trainer.accelerator)
        if config.validate_first and trainer.num_sanity_val_steps is None:
            trainer.num_sanity_val_steps = 0  # the first validation checks the whole val loop anyway

    def instantiate_trainer(self, **kwargs):
        monitor, mode = self.model.monitor
        config = cli_value(self, self.config_init, "trainer", default={})
        tracking: TrackingConfig = cli_value(self, self.config_init, "tracking")
        if config.get("logger") in (None, True):
            run_id = (self.resume.wandb_run_id if self.resume else None) or new_run_id()
            kwargs["logger"] = build_loggers(tracking, self.run_dir, run_id, self.segment)
        callbacks = list(config.get("callbacks") or []) + [
            ModelCheckpoint(dirpath=self.run_dir / "checkpoints", monitor=monitor, mode=mode,
                            filename="best-step{step}", auto_insert_metric_name=False),
            # Its own callback: Lightning 2.6 refreshes `save_last` only when the best one changed.
            ModelCheckpoint(dirpath=self.run_dir / "checkpoints", monitor=None, filename=LAST_CHECKPOINT.stem,
                            enable_version_counter=False),
            LearningRateMonitor(logging_interval="step"),
            RunArtifacts(self.run_dir, self.segment, self.earlier),
            ImagePanels(self.run_dir, tracking.num_panel_images),
            DataSheet(self.run_dir, tracking.data_sheet_samples),
            ValidationDiagnostics(self.run_dir),
            Throughput(),
            NonFiniteGuard(cli_value(self, self.config_init, "non_finite")),
            ResumeDataPosition(),
        ]
        extra = [ema_callback(cli_value(self, self.config_init, "ema"), config.get("strategy", "auto")),
                 early_stopping_callback(cli_value(self, self.config_init, "early_stopping"), monitor, mode)]
        callbacks += [c for c in extra if c is not None]
        if cli_value(self, self.config_init, "validate_first"):
            callbacks.append(ValidateFirst())
        every_n_steps = cli_value(self, self.config_init, "checkpoint_every_n_steps")
        if every_n_steps:
            callbacks.append(StepCheckpoint(self.run_dir / LAST_CHECKPOINT, every_n_steps))
        preemption: PreemptionConfig = cli_value(self, self.config_init, "preemption")
        if preemption.signals:
            callbacks.append(PreemptionStop(self.run_dir / LAST_CHECKPOINT, preemption))
        if config.get("enable_progress_bar") is not False:
            callbacks.append(StepProgressBar())
        kwargs["callbacks"] = callbacks
        kwargs["use_distributed_sampler"] = False  # the DataModules split data over processes themselves
        plugins = config.get("plugins") or []
        kwargs["plugins"] = (plugins if isinstance(plugins, list) else [plugins]) + [AtomicCheckpointIO()]
        if preemption.signals and SLURMEnvironment.detect() and not any(
                isinstance(p, ClusterEnvironment) for p in kwargs["plugins"]):
            # Lightning's own requeue saves inside the signal handler, mid-step; PreemptionStop requeues instead.
            kwargs["plugins"].append(SLURMEnvironment(auto_requeue=False))
        trainer = super().instantiate_trainer(**kwargs)
        agree_on_failed_saves(trainer.strategy)  # a failed save stops every rank, none waits in a barrier
        return trainer

    def resolved_config(self) -> dict:
        """The whole recipe as plain data, for the dashboard."""
        return yaml.safe_load(self.parser.dump(self.config, skip_validation=True))


def train(argv: list[str] | None = None, parser_exits: bool = True) -> dict | None:
    """Parse, fit, validate the final weights, write the summary; returns the summary (``--list-configs``: prints
    the recipes, returns None). ``parser_exits``: the parser's own errors (an unknown key, a wrong type) print its
    usage and end the process, as on the command line; False: they are a ``BadConfig`` (the Python API).

    The run directory reaches the ranks Lightning launches through ``RUN_DIR_ENV``; it is put back as it was
    when the run ends, so that a later run in this process (``sapiens2_ft.train`` twice) starts a run of its own.
    """
    inherited = os.environ.get(RUN_DIR_ENV)
    try:
        return _train(argv, parser_exits)
    finally:
        if inherited is None:
            os.environ.pop(RUN_DIR_ENV, None)
        else:
            os.environ[RUN_DIR_ENV] = inherited


main = console_command(train)  # train.py, `sapiens2-ft train`: an error is its message and exit status 1


def _train(argv: list[str] | None, parser_exits: bool) -> dict | None:
    argv = sys.argv[1:] if argv is None else argv
    if "--list-configs" in argv:
        print(format_config_list())
        return None
    given = list(argv)
    argv = resolve_config_args(argv)
    # sys.argv stays as it is: Lightning's launcher starts the other ranks by re-running it.
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")
    try:
        cli = Sapiens2CLI(task_of(argv), args=argv, run=False, seed_everything_default=0,
                          save_config_callback=SaveRecipe, save_config_kwargs={"overwrite": True},
                          auto_configure_optimizers=False, parser_kwargs={"exit_on_error": parser_exits})
    except ArgumentError as err:  # parser_exits False: the parser's message, raised
        raise BadConfig(str(err)) from None
    trainer, model, data = cli.trainer, cli.model, cli.datamodule
    set_tf32(cli.config.tf32)
    checkpoint = None
    if cli.resume is not None:
        info = cli.resume
        check_compatible(info.path, info.task, info.labels, model.task, model.labels, "--resume",
                         task_spec(model.task).model.label_kind)
        checkpoint = str(info.path)
        if trainer.is_global_zero:
            print(f"resuming {info.describe()}: restores the model, optimiser, lr schedule, loop state"
                  + (f" and wandb run {info.wandb_run_id}" if info.wandb_run_id else ""))
    elif cli.config.init_from and trainer.is_global_zero:
        print(f"--init_from {cli.config.init_from}: weights only; optimiser, lr schedule and step start at 0")
    commit = git_commit()
    for logger in trainer.loggers[1:]:  # the dashboard; the CSV logger already has config.yaml beside it
        logger.log_hyperparams({"config": cli.resolved_config(), "git_commit": commit})
    started = time.time()
    try:
        trainer.fit(model, datamodule=data, ckpt_path=checkpoint, weights_only=True)
    except CheckpointSaveError:  # the message says it all (path, size, free space); every rank stops
        close_dashboards(trainer, exit_code=1)
        raise
    except DataError as err:  # names the file, the record and the field
        close_dashboards(trainer, exit_code=1)
        raise err.with_message(f"data: {err}") from None
    except Preempted as stop:  # last.ckpt is written; requeue (SLURM) and exit with a status that asks for a rerun
        close_dashboards(trainer)
        preemption = cli.config.preemption
        if trainer.is_global_zero:
            requeued = requeue_slurm_job() if preemption.requeue else "not requeued (preemption.requeue: false)"
            print(f"preempted: {stop}; {requeued}; continue with {resume_hint(cli.run_dir)} "
                  f"(exit status {preemption.exit_code})")
        raise RunPreempted(str(stop), preemption.exit_code) from None
    except BaseException:
        close_dashboards(trainer, exit_code=1)
        raise
    artifacts = next(c for c in trainer.callbacks if isinstance(c, RunArtifacts))
    if artifacts.last_validated_step != trainer.global_step:
        trainer.validate(model, datamodule=data, verbose=False)
    if artifacts.last_saved_step != trainer.global_step:  # steps after the last validation: keep them too
        trainer.save_checkpoint(cli.run_dir / LAST_CHECKPOINT)  # CheckpointSaveError: its message says it all
    guard = next(c for c in trainer.callbacks if isinstance(c, NonFiniteGuard))
    summary = artifacts.write_summary(trainer, model, data, wall_time_s=time.time() - started, extra={
        "git_commit": commit, "non_finite_skipped_steps": guard.skipped, "non_finite_events": guard.events,
        **run_facts(trainer, data, given)})
    leave_process_group(trainer)
    if trainer.is_global_zero:
        close_dashboards(trainer)
        finish_run(cli.run_dir, summary, model.monitor[0], export=cli.config.export, hub=cli.config.hub)
    return summary


def finish_run(run_dir: Path, summary: dict, monitor: str, export: bool, hub=None) -> None:
    """Rank 0 after fit: the results page, the export of the best checkpoint (and its upload), the closing lines. A
    refused upload ends the run with its message once everything else is written."""
    results = write_results_png(run_dir, monitor)
    refused = None
    if export and summary["best_checkpoint"]:
        summary["export"] = str(export_checkpoint(summary["best_checkpoint"], run_dir / "export", overwrite=True))
        if hub is not None and hub.push_to_hub:
            try:
                summary["hub"] = push_export(summary["export"], hub.push_to_hub, hub.private)
            except HubError as err:
                refused = (f"{err}\nthe export is in {summary['export']}; upload it with "
                           f"`{push_command(summary['export'], hub.push_to_hub, hub.private)}`")
        write_json(run_dir, "summary.json", summary, indent=2)
    print(f"run directory: {run_dir}")
    if results:
        print(f"curves: {results}; prediction overlays: {run_dir / 'overlays'}")
    if summary.get("export"):
        print(f"model for transformers / predict: {summary['export']}")
    if summary.get("hub"):
        print(f"uploaded to the Hugging Face Hub: {summary['hub']}")
    if summary.get("start_metrics"):
        print("start metrics: " + "  ".join(f"{k}={v:.4f}" for k, v in summary["start_metrics"].items()
                                           if isinstance(v, (int, float))))
    print("final metrics: " + "  ".join(f"{k}={v:.4f}" for k, v in summary["metrics"].items()))
    if refused:
        raise HubError(refused)


def leave_process_group(trainer) -> None:
    """After a finished fit every rank meets the others once more and takes the process group down, before rank
    0's closing work (results page, export: minutes for a 5B model, longer than a collective may wait). Seen here
    under torchrun: a finished run failed when rank 1 aborted at exit ("terminate called without an active
    exception") with its gloo group still up while rank 0 wrote the results."""
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        trainer.strategy.barrier("sapiens2_ft.run_end")
        torch.distributed.destroy_process_group()


def close_dashboards(trainer, exit_code: int = 0) -> None:
    """Finish the wandb run (flushes its files; a later run in this process starts its own)."""
    for logger in trainer.loggers:
        if isinstance(logger, WandbLogger) and experiment_started(logger):
            logger.experiment.finish(exit_code=exit_code)
