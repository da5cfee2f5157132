"""Run directories: where a run writes, which one ``--resume`` continues, and refusing to overwrite one.

``runs/<config>/<stamp>`` by default, the same on every rank of a job. ``--resume auto`` takes the latest
run of the config holding a last checkpoint (or the previous checkpoint a crash left as ``.old``).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from sapiens2_ft.models.checkpoints import is_distributed_checkpoint
from sapiens2_ft.training.checkpoint_io import last_good

RUN_DIR_ENV = "SAPIENS2_FT_RUN_DIR"


def run_name(config_files: list) -> str:
    """The name runs are grouped under: the first ``--config`` (the recipe; later ones are pieces such as
    ``strategy/fsdp2.yaml``). A run's own saved ``config.yaml`` keeps the name of the run it came from."""
    if not config_files:
        return "run"
    first = Path(str(config_files[0]))
    run = first.parent
    if first.name == "config.yaml" and (run / "checkpoints").is_dir():
        # runs/<name>/<stamp>/config.yaml; a run elsewhere (--run_dir DIR) lends its own name
        return run.parent.name if run.parent.parent.name == "runs" else run.name
    return first.stem


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


LAST_CHECKPOINT = Path("checkpoints") / "last.ckpt"  # a file, or a directory for distributed checkpoints


def latest_run(config_name: str) -> Path | None:
    """The most recently changed run directory of a config that holds a last checkpoint."""
    runs = [d for d in (Path("runs") / config_name).glob("*") if last_good(d / LAST_CHECKPOINT)]
    return max(runs, key=lambda d: last_good(d / LAST_CHECKPOINT).stat().st_mtime) if runs else None


def resolve_resume(resume: str, run_dir: str | None, config_name: str) -> tuple[Path, Path] | None:
    """``--resume``: (checkpoint, run directory), or None for ``auto`` with nothing to resume.

    ``auto`` takes ``run_dir`` when given (or inherited by a launched rank), else the latest run of the
    config. A PATH is a run directory, or a checkpoint (file or distributed directory) whose run
    directory is the one above its ``checkpoints/`` folder.
    """
    if resume == "auto":
        chosen = Path(run_dir or os.environ.get(RUN_DIR_ENV) or latest_run(config_name) or "")
        checkpoint = last_good(chosen / LAST_CHECKPOINT) if str(chosen) else None
        return (checkpoint, chosen) if checkpoint else None
    path = Path(resume)
    if last_good(path / LAST_CHECKPOINT):
        return last_good(path / LAST_CHECKPOINT), path
    if not path.exists():
        raise SystemExit(f"--resume: {path} does not exist (give a checkpoint, a run directory, or 'auto')")
    if path.is_dir() and not is_distributed_checkpoint(path):
        raise SystemExit(f"--resume: {path} holds no {LAST_CHECKPOINT} (the run stopped before its first "
                         "checkpoint?) and is not a checkpoint itself; start a new run with another --run_dir")
    owner = path.parent.parent if path.parent.name == "checkpoints" else Path(run_dir or default_run_dir(config_name))
    return path, owner


def check_fresh(run_dir: Path) -> None:
    """Refuse to write a new run over a finished one's files."""
    taken = [name for name in ("summary.json", "checkpoints") if (run_dir / name).exists()]
    if taken:
        raise SystemExit(f"run directory {run_dir} already holds a run ({', '.join(taken)}); "
                         f"pass another --run_dir, or --resume {run_dir} to continue it")
