"""``python train.py --config pose_demo.yaml [--section.key value ...]``: LightningCLI around the task modules.

- ``--config NAME`` looks NAME up in ``configs/`` when it is not a path; several ``--config`` merge in order.
- The top-level ``task`` key (pose, seg, normal, pointmap, matting) picks the LightningModule and DataModule.
- Every run gets a run directory (``--run_dir``, default ``runs/<config>/<timestamp>``) holding the
  resolved ``config.yaml``, ``checkpoints/`` (best by the task's metric, and last), the logs,
  the latest validation's predictions (pose ``predictions.json``, dense ``predictions/``) and ``summary.json``.
"""

from __future__ import annotations

import os
import sys
import warnings
import time
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint
from lightning.pytorch.cli import LightningCLI
from lightning.pytorch.loggers import CSVLogger

from sapiens2_ft.callbacks.run_artifacts import RunArtifacts

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs"


@dataclass(frozen=True)
class Task:
    module: str
    datamodule: str
    links: tuple[tuple[str, str], ...] = ()


DENSE_DATA = "datamodules.dense_datamodule.DenseDataModule"
DENSE_LINKS = (("task", "data.task"), ("data.input_size", "model.input_size"))
TASKS = {
    "pose": Task("sapiens2_ft.modules.pose.PoseModule", "datamodules.pose_datamodule.PoseDataModule",
                 links=(("data.keypoints", "model.keypoints"), ("data.input_size", "model.input_size"))),
    "seg": Task("sapiens2_ft.modules.segmentation.SegmentationModule", DENSE_DATA,
                links=DENSE_LINKS + (("data.class_names", "model.class_names"),)),
    "normal": Task("sapiens2_ft.modules.normal.NormalModule", DENSE_DATA, links=DENSE_LINKS),
    "pointmap": Task("sapiens2_ft.modules.pointmap.PointmapModule", DENSE_DATA, links=DENSE_LINKS),
    "matting": Task("sapiens2_ft.modules.matting.MattingModule", DENSE_DATA, links=DENSE_LINKS),
}


def _import(path: str):
    module, name = path.rsplit(".", 1)
    return getattr(__import__(module, fromlist=[name]), name)


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
            raise SystemExit(f"config '{value}' not found (as a path or in {CONFIG_DIR}); configs: {known}")
    return out


def task_of(argv: list[str]) -> str:
    """The ``task`` key of the last config / override that sets it (default pose)."""
    task = "pose"
    for i, arg in enumerate(argv):
        if arg == "--config" and i + 1 < len(argv):
            with open(argv[i + 1]) as f:
                task = (yaml.safe_load(f) or {}).get("task", task)
        elif arg == "--task" and i + 1 < len(argv):
            task = argv[i + 1]
        elif arg.startswith("--task="):
            task = arg.split("=", 1)[1]
    if task not in TASKS:
        raise SystemExit(f"unknown task '{task}'; known: {sorted(TASKS)}")
    return task


RUN_DIR_ENV = "SAPIENS2_FT_RUN_DIR"


def default_run_dir(config_name: str) -> Path:
    """``runs/<config>/<stamp>``, the same on every rank of one job.

    Ranks that Lightning launches inherit the parent's environment; ranks started by torchrun or
    SLURM share their job id, which names the run instead of the clock.
    """
    if os.environ.get(RUN_DIR_ENV):
        return Path(os.environ[RUN_DIR_ENV])
    job = os.environ.get("TORCHELASTIC_RUN_ID", "none")
    stamp = job if job != "none" else os.environ.get("SLURM_JOB_ID") or time.strftime("%Y%m%d-%H%M%S")
    run_dir = Path("runs") / config_name / stamp
    os.environ[RUN_DIR_ENV] = str(run_dir)
    return run_dir


def check_fresh(run_dir: Path) -> None:
    """Refuse to write a new run over a finished one's files."""
    taken = [name for name in ("summary.json", "checkpoints") if (run_dir / name).exists()]
    if taken:
        raise SystemExit(f"run directory {run_dir} already holds a run ({', '.join(taken)}); "
                         f"pass another --run_dir")


class Sapiens2CLI(LightningCLI):
    """Adds ``task`` and ``run_dir`` keys, task links, and the run directory."""

    def __init__(self, task: str, **kwargs):
        self.task = TASKS[task]
        super().__init__(_import(self.task.module), _import(self.task.datamodule), **kwargs)

    def add_arguments_to_parser(self, parser) -> None:
        parser.add_argument("--task", default="pose", help=f"Task: {', '.join(TASKS)}")
        parser.add_argument("--run_dir", default=None, help="Run directory (default: runs/<config>/<timestamp>)")
        for source, target in self.task.links:
            parser.link_arguments(source, target)

    def before_instantiate_classes(self) -> None:
        config = self.config
        if not config.run_dir:
            names = [Path(str(p)).stem for p in (config.get("config") or [])] or ["run"]
            config.run_dir = str(default_run_dir(names[-1]))
        self.run_dir = Path(config.run_dir)
        check_fresh(self.run_dir)
        self.run_dir.mkdir(parents=True, exist_ok=True)
        trainer = config.trainer
        trainer.default_root_dir = str(self.run_dir)
        if trainer.precision is None:
            trainer.precision = "bf16-mixed" if torch.cuda.is_available() else "32-true"

    def instantiate_trainer(self, **kwargs):
        monitor, mode = self.model.monitor
        config = self._get(self.config_init, "trainer", default={})
        if config.get("logger") in (None, True):
            kwargs["logger"] = CSVLogger(self.run_dir, name="", version="")
        kwargs["callbacks"] = list(config.get("callbacks") or []) + [
            ModelCheckpoint(dirpath=self.run_dir / "checkpoints", monitor=monitor, mode=mode, save_last=True,
                            filename="best-step{step}", auto_insert_metric_name=False),
            LearningRateMonitor(logging_interval="step"),
            RunArtifacts(self.run_dir),
        ]
        return super().instantiate_trainer(**kwargs)


def main(argv: list[str] | None = None) -> dict:
    """Parse, fit, validate the final weights, write the summary; returns the summary."""
    argv = resolve_config_args(sys.argv[1:] if argv is None else argv)
    # sys.argv stays as it is: Lightning's launcher starts the other ranks by re-running it.
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")
    cli = Sapiens2CLI(task_of(argv), args=argv, run=False, seed_everything_default=0,
                      save_config_kwargs={"overwrite": True}, auto_configure_optimizers=False)
    trainer, model, data = cli.trainer, cli.model, cli.datamodule
    started = time.time()
    trainer.fit(model, datamodule=data)
    artifacts = next(c for c in trainer.callbacks if isinstance(c, RunArtifacts))
    if artifacts.last_validated_step != trainer.global_step:
        trainer.validate(model, datamodule=data, verbose=False)
    summary = artifacts.write_summary(trainer, model, data, wall_time_s=time.time() - started)
    if trainer.is_global_zero:
        print(f"run directory: {cli.run_dir}")
        print("final metrics: " + "  ".join(f"{k}={v:.4f}" for k, v in summary["metrics"].items()))
    return summary
