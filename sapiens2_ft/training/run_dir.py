"""Run directories: where a run writes, which one ``--resume`` continues, and refusing to overwrite one.

``runs/<config>/<stamp>`` by default, the same on every rank of a job. ``--resume auto`` takes the latest
run of the config holding a checkpoint, and of its checkpoints the newest readable one: ``last`` (or the previous
one a crash left as ``.old``), then ``best-*`` by step, then any other (step) checkpoint by step; an unreadable or
incomplete one (truncated, zeroed, a distributed checkpoint missing a shard) is skipped with the reason printed.
"""

from __future__ import annotations

import os
import re
import time
from pathlib import Path

from datamodules.boundary.files import read_head
from sapiens2_ft.models.checkpoints import CheckpointError, is_distributed_checkpoint, read_info

RUN_DIR_ENV = "SAPIENS2_FT_RUN_DIR"
RUN_MARKER = ".sapiens2_ft_run"  # marks a folder as a run directory: only those take a new run's files


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
    run_dir = job_run_dir(config_name) or fresh_stamp_dir(Path("runs") / config_name)
    os.environ[RUN_DIR_ENV] = str(run_dir)
    return run_dir


def fresh_stamp_dir(parent: Path) -> Path:
    """``parent/<date-time>``, with ``-2``, ``-3``, ... when a run of the same second is already there."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    run_dir, n = parent / stamp, 2
    while run_dir.exists():
        run_dir, n = parent / f"{stamp}-{n}", n + 1
    return run_dir


def job_run_dir(config_name: str) -> Path | None:
    """``runs/<config>/<job id>`` under torchrun (its run id) or SLURM (the job id, kept by a requeued job)."""
    job = os.environ.get("TORCHELASTIC_RUN_ID", "none")
    job = job if job != "none" else os.environ.get("SLURM_JOB_ID")
    return Path("runs") / config_name / job if job else None


LAST_CHECKPOINT = Path("checkpoints") / "last.ckpt"  # a file, or a directory for distributed checkpoints


def _step_in_name(path: Path) -> int:
    match = re.search(r"step=?(\d+)", path.name)
    return int(match.group(1)) if match else -1


def checkpoint_candidates(run_dir: Path) -> list[Path]:
    """A run's checkpoints in the order ``--resume`` tries them: ``last.ckpt``, ``last.ckpt.old``, ``best-*`` by
    step (newest first), then the others by the step in their names (partial and temporary files left out)."""
    folder = Path(run_dir) / LAST_CHECKPOINT.parent
    last = Path(run_dir) / LAST_CHECKPOINT
    lasts = [p for p in (last, last.with_name(last.name + ".old")) if p.exists()]
    others = [p for p in folder.glob("*.ckpt") if p.name != last.name] if folder.is_dir() else []
    best = sorted((p for p in others if p.name.startswith("best")), key=_step_in_name, reverse=True)
    rest = sorted((p for p in others if not p.name.startswith("best")), key=lambda p: (_step_in_name(p),
                                                                                       p.stat().st_mtime), reverse=True)
    return lasts + best + rest


def unreadable_reason(path: Path) -> str | None:
    """Why ``--resume`` cannot use a checkpoint (None when it can): its record does not load (a truncated or
    zeroed file), or a distributed checkpoint lacks a shard file its metadata lists or holds it shorter, or holds
    anything but tensors and plain data (``models/dcp_metadata.py``: checked before Lightning unpickles it)."""
    if path.is_file():
        head = read_head(path, 4096)
        if not head:
            return f"{path} is empty (0 bytes)"
        if not head.startswith(b"PK\x03\x04"):  # torch.save writes a zip archive
            zeros = not head.strip(b"\0")
            return (f"{path} is not a checkpoint file: it " + ("starts with zeros (its data was lost, as in a crash "
                    "before the file system wrote it)" if zeros else "does not start with a zip header")
                    + f", {path.stat().st_size:,} bytes")
    try:
        read_info(path)
    except (CheckpointError, OSError) as err:
        return str(err)
    if not path.is_dir():
        return None
    from sapiens2_ft.models.dcp_metadata import UnsafeCheckpointError, check_byte_items, read_metadata

    try:
        metadata = read_metadata(path)
    except UnsafeCheckpointError as err:
        return str(err)
    except ValueError as err:
        return f"its metadata (.metadata) does not load ({err})"
    needed: dict[str, int] = {}
    for info in (metadata.storage_data or {}).values():
        needed[info.relative_path] = max(needed.get(info.relative_path, 0), info.offset + info.length)
    for name, size in sorted(needed.items()):
        shard = path / name
        if not shard.is_file():
            return f"shard {name} is missing (listed in its .metadata)"
        if shard.stat().st_size < size:
            return f"shard {name} is {shard.stat().st_size:,} bytes, its .metadata needs {size:,} (cut short)"
    try:  # Lightning unpickles these on resume
        check_byte_items(path, metadata)
    except UnsafeCheckpointError as err:
        return str(err)
    return None


def newest_readable(run_dir: Path) -> Path | None:
    """The first readable checkpoint of :func:`checkpoint_candidates`, printing each one skipped and why; None when
    the run has none; SystemExit when it has some and none is readable."""
    candidates = checkpoint_candidates(run_dir)
    skipped = []
    for candidate in candidates:
        reason = unreadable_reason(candidate)
        if reason is None:
            if skipped:
                print(f"--resume: continuing from {candidate}, the newest readable checkpoint of {run_dir}")
            return candidate
        skipped.append(f"{candidate}: {reason}")
        print(f"--resume: skipping {candidate}, unreadable or incomplete: {reason}")
    if skipped:
        raise SystemExit(f"--resume: no readable checkpoint in {run_dir}:\n  " + "\n  ".join(skipped)
                         + "\nstart a new run with another --run_dir, or --init_from an exported model")
    return None


def latest_run(config_name: str) -> Path | None:
    """The most recently changed run directory of a config that holds a checkpoint."""
    runs = [(max(p.stat().st_mtime for p in found), d) for d in (Path("runs") / config_name).glob("*")
            if (found := checkpoint_candidates(d))]
    return max(runs)[1] if runs else None


def resolve_resume(resume: str, run_dir: str | None, config_name: str) -> tuple[Path, Path] | None:
    """``--resume``: (checkpoint, run directory), or None for ``auto`` with nothing to resume.

    ``auto`` takes ``run_dir`` when given (or inherited by a launched rank), else this torchrun / SLURM job's
    own run when it has a checkpoint (a restart, a requeue), else the latest run of the config. A PATH is a run directory, or a checkpoint (file or distributed directory) whose run
    directory is the one above its ``checkpoints/`` folder. Of a run directory the newest readable checkpoint
    is taken (:func:`newest_readable`); a checkpoint given by path must be readable itself.
    """
    if resume == "auto":
        job = job_run_dir(config_name)  # a restarted or requeued job continues its own run
        job = job if job is not None and checkpoint_candidates(job) else None
        chosen = run_dir or os.environ.get(RUN_DIR_ENV) or job or latest_run(config_name)
        checkpoint = newest_readable(Path(chosen)) if chosen else None
        return (checkpoint, Path(chosen)) if checkpoint else None
    path = Path(resume)
    if path.is_dir() and not is_distributed_checkpoint(path) and checkpoint_candidates(path):
        return newest_readable(path), path
    if not path.exists():
        raise SystemExit(f"--resume: {path} does not exist (give a checkpoint, a run directory, or 'auto')")
    if path.is_dir() and not is_distributed_checkpoint(path):
        raise SystemExit(f"--resume: {path} holds no {LAST_CHECKPOINT} (the run stopped before its first "
                         "checkpoint?) and is not a checkpoint itself; start a new run with another --run_dir")
    reason = unreadable_reason(path)
    if reason is not None:
        raise SystemExit(f"--resume: {path} is unreadable or incomplete: {reason}; give another checkpoint, or its "
                         "run directory to take the newest readable one")
    owner = path.parent.parent if path.parent.name == "checkpoints" else Path(run_dir or default_run_dir(config_name))
    return path, owner


def check_fresh(run_dir: Path) -> None:
    """Refuse to write a new run over a finished one's files, or into a folder of other files (one without
    :data:`RUN_MARKER`, which :func:`claim` writes first into every run directory)."""
    taken = [name for name in ("summary.json", "checkpoints") if (run_dir / name).exists()]
    if taken:
        raise SystemExit(f"run directory {run_dir} already holds a run ({', '.join(taken)}); "
                         f"pass another --run_dir, or --resume {run_dir} to continue it")
    if run_dir.exists() and not run_dir.is_dir():
        raise SystemExit(f"--run_dir {run_dir} is a file; give a new or empty folder")
    others = sorted(p.name for p in run_dir.iterdir()) if run_dir.is_dir() else []
    if others and RUN_MARKER not in others:
        raise SystemExit(f"--run_dir {run_dir} is not a run directory: it holds other files ({', '.join(others[:5])}"
                         f"{' ...' if len(others) > 5 else ''}) that a run would write over; give a new or empty "
                         "folder")


def claim(run_dir: Path) -> None:
    """Create ``run_dir`` and mark it as a run directory (before anything else is written into it)."""
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / RUN_MARKER).touch()
