"""Run directories: where a run writes, which one ``--resume`` continues, and refusing to overwrite one.

``runs/<config>/<stamp>`` by default, the same on every rank of a job. ``--resume auto`` chooses a run only inside a
torchrun or SLURM job (the job's own run, else the latest run of the config holding a checkpoint) or with ``--run_dir``;
elsewhere it is refused, and the run to continue is named (``--resume RUN_DIR``). Of a run's checkpoints the newest
readable one is taken: ``last`` (or the previous one a crash left as ``.old``), then ``best-*`` by step, then any other
(step) checkpoint by step; an unreadable or incomplete one (truncated, zeroed, a distributed checkpoint missing a shard)
is skipped with the reason printed.

A resumed run is a new segment of its run directory: it never replaces what an earlier segment recorded. The first
segment's recipe is ``config.yaml``; segment N's is ``config.resumeN.yaml`` (and ``hparams.resumeN.yaml``); each
``summary.json`` keeps the earlier segments' summaries under ``segments``. A finished run (``summary.json`` written)
whose checkpoint has reached the trainer's end is not resumed at all (:func:`finished_message`).
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

from datamodules.boundary.files import read_head, read_text
from datamodules.boundary.limits import MAX_FILE_BYTES
from datamodules.errors import BadInput, NotFound, Refused
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


def job_id() -> str | None:
    """The id of the torchrun (its run id) or SLURM job (the job id, kept by a requeued job) this process is in."""
    job = os.environ.get("TORCHELASTIC_RUN_ID", "none")
    return (job if job != "none" else os.environ.get("SLURM_JOB_ID")) or None


def job_run_dir(config_name: str) -> Path | None:
    """``runs/<config>/<job id>`` under torchrun or SLURM (:func:`job_id`), None outside a job."""
    job = job_id()
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
    the run has none; BadInput when it has some and none is readable."""
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
        raise BadInput(f"--resume: no readable checkpoint in {run_dir}:\n  " + "\n  ".join(skipped)
                       + "\nstart a new run with another --run_dir, or --init_from an exported model")
    return None


def latest_run(config_name: str) -> Path | None:
    """The most recently changed run directory of a config that holds a checkpoint."""
    runs = [(max(p.stat().st_mtime for p in found), d) for d in (Path("runs") / config_name).glob("*")
            if (found := checkpoint_candidates(d))]
    return max(runs)[1] if runs else None


def auto_outside_a_job(config_name: str) -> str:
    """Why ``--resume auto`` is refused outside a torchrun or SLURM job, naming the run it would have taken."""
    latest = latest_run(config_name)
    state = "" if latest is None else (" (finished: it has summary.json)" if (latest / SUMMARY_FILE).exists()
                                       else " (not finished)")
    found = (f"; the latest run of this config with a checkpoint is {latest}{state}" if latest is not None
             else f"; runs/{config_name}/ holds no run with a checkpoint")
    return ("--resume auto chooses the run to continue only inside a torchrun or SLURM job (the job's own run after a "
            "restart or a requeue); here, name it: --resume RUN_DIR (or a checkpoint), or --run_dir RUN_DIR with "
            f"--resume auto{found}. Nothing was written.")


def resume_hint(run_dir: Path) -> str:
    """How to continue ``run_dir`` after a stop: ``--resume auto`` inside a job (its own run), else by name."""
    return "--resume auto" if job_id() is not None else f"--resume {run_dir}"


def resolve_resume(resume: str, run_dir: str | None, config_name: str) -> tuple[Path, Path] | None:
    """``--resume``: (checkpoint, run directory), or None for ``auto`` with nothing to resume.

    ``auto`` takes ``run_dir`` when given (or inherited by a launched rank), else this torchrun / SLURM job's
    own run when it has a checkpoint (a restart, a requeue), else the latest run of the config; outside a job and
    without ``run_dir`` it is refused (``Refused``, :func:`auto_outside_a_job`): a finished run is never picked
    silently. A PATH is a run directory, or a checkpoint (file or distributed directory) whose run
    directory is the one above its ``checkpoints/`` folder. Of a run directory the newest readable checkpoint
    is taken (:func:`newest_readable`); a checkpoint given by path must be readable itself.
    """
    if resume == "auto":
        named = run_dir or os.environ.get(RUN_DIR_ENV)
        job = job_run_dir(config_name)  # a restarted or requeued job continues its own run
        if not named and job is None:
            raise Refused(auto_outside_a_job(config_name))
        job = job if job is not None and checkpoint_candidates(job) else None
        chosen = named or job or latest_run(config_name)
        checkpoint = newest_readable(Path(chosen)) if chosen else None
        return (checkpoint, Path(chosen)) if checkpoint else None
    path = Path(resume)
    if path.is_dir() and not is_distributed_checkpoint(path) and checkpoint_candidates(path):
        return newest_readable(path), path
    if not path.exists():
        raise NotFound(f"--resume: {path} does not exist (give a checkpoint, a run directory, or 'auto')")
    if path.is_dir() and not is_distributed_checkpoint(path):
        raise NotFound(f"--resume: {path} holds no {LAST_CHECKPOINT} (the run stopped before its first "
                       "checkpoint?) and is not a checkpoint itself; start a new run with another --run_dir")
    reason = unreadable_reason(path)
    if reason is not None:
        raise BadInput(f"--resume: {path} is unreadable or incomplete: {reason}; give another checkpoint, or its "
                       "run directory to take the newest readable one")
    owner = path.parent.parent if path.parent.name == "checkpoints" else Path(run_dir or default_run_dir(config_name))
    return path, owner


SUMMARY_FILE = "summary.json"  # written when a run (segment) finishes
CONFIG_FILE = "config.yaml"  # the first segment's recipe


def reached_end(global_step: int, epochs_completed: int, max_steps: int | None, max_epochs: int | None) -> bool:
    """Whether a checkpoint at ``global_step`` after ``epochs_completed`` whole epochs leaves nothing to train for a
    trainer of ``max_steps`` / ``max_epochs`` (Lightning's meanings: -1 or None = no limit by steps; epochs default
    to 1000 when no step limit is set, -1 = none)."""
    if max_steps is not None and max_steps >= 0:
        return global_step >= max_steps
    epochs = 1000 if max_epochs is None else max_epochs
    return epochs >= 0 and epochs_completed >= epochs


def finished_message(run_dir: Path, global_step: int, max_steps: int | None, max_epochs: int | None) -> str:
    """Why a finished run is not resumed, and the ways on."""
    key, limit = (("max_steps", max_steps) if max_steps is not None and max_steps >= 0
                  else ("max_epochs", 1000 if max_epochs is None else max_epochs))
    return (f"--resume: {run_dir} is finished (it has {SUMMARY_FILE}; its checkpoint is at step {global_step}, "
            f"trainer.{key} {limit} leaves nothing to train); it is left as it is. To train it further, resume it "
            f"with a larger --trainer.{key} (a new segment: its own config.resumeN.yaml, and {SUMMARY_FILE} keeps "
            f"this one's under 'segments'); to start a new run from its weights: --init_from "
            f"{run_dir / 'export'} with another --run_dir.")


def segment_file(name: str, segment: int) -> str:
    """The file of segment ``segment`` for a run file ``name``: ``config.yaml`` (0), ``config.resume2.yaml`` (2)."""
    if segment == 0:
        return name
    stem, dot, suffix = name.partition(".")
    return f"{stem}.resume{segment}{dot}{suffix}"


def next_segment(run_dir: Path) -> int:
    """The segment a run resumed into ``run_dir`` starts: 0 when the run has no ``config.yaml`` yet (it stopped
    before writing it), else one more than its latest ``config.resumeN.yaml`` (1 for the first resume)."""
    if not (Path(run_dir) / CONFIG_FILE).exists():
        return 0
    pattern = re.compile(r"config\.resume(\d+)\.yaml")
    found = [int(m.group(1)) for p in Path(run_dir).glob("config.resume*.yaml") if (m := pattern.fullmatch(p.name))]
    return max(found, default=0) + 1


def latest_config(run_dir: Path) -> Path:
    """The recipe of a run's latest segment (``config.resumeN.yaml`` of the largest N, else ``config.yaml``)."""
    segment = next_segment(run_dir) - 1
    return Path(run_dir) / segment_file(CONFIG_FILE, max(segment, 0))


def earlier_segments(run_dir: Path) -> list[dict]:
    """The summaries of the segments before this one, oldest first: those the run's ``summary.json`` keeps under
    ``segments``, then that summary itself; [] when the run has none (a first segment, or one that never finished)."""
    path = Path(run_dir) / SUMMARY_FILE
    if not path.is_file():
        return []
    text = read_text(path, MAX_FILE_BYTES, "summary")
    try:
        summary = json.loads(text)
    except ValueError:  # kept as it is
        return [{"unreadable_summary": text}]
    if not isinstance(summary, dict):
        return [{"unreadable_summary": text}]
    return [*summary.pop("segments", []), summary]


def check_fresh(run_dir: Path) -> None:
    """Refuse to write a new run over a finished one's files, or into a folder of other files (one without
    :data:`RUN_MARKER`, which :func:`claim` writes first into every run directory)."""
    taken = [name for name in (SUMMARY_FILE, "checkpoints") if (run_dir / name).exists()]
    if taken:
        raise Refused(f"run directory {run_dir} already holds a run ({', '.join(taken)}); "
                      f"pass another --run_dir, or --resume {run_dir} to continue it")
    if run_dir.exists() and not run_dir.is_dir():
        raise BadInput(f"--run_dir {run_dir} is a file; give a new or empty folder")
    others = sorted(p.name for p in run_dir.iterdir()) if run_dir.is_dir() else []
    if others and RUN_MARKER not in others:
        raise Refused(f"--run_dir {run_dir} is not a run directory: it holds other files ({', '.join(others[:5])}"
                      f"{' ...' if len(others) > 5 else ''}) that a run would write over; give a new or empty "
                      "folder")


def claim(run_dir: Path) -> None:
    """Create ``run_dir`` and mark it as a run directory (before anything else is written into it); the mark of a run
    directory is left as it is."""
    run_dir.mkdir(parents=True, exist_ok=True)
    if not (run_dir / RUN_MARKER).exists():
        (run_dir / RUN_MARKER).touch()
