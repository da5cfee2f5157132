"""Checkpoints written atomically: a crash or a SIGKILL while saving leaves the previous checkpoint whole.

A file is written beside its target under a temporary name, flushed to disk, then renamed over the
target (``os.replace`` is atomic on POSIX file systems). A distributed checkpoint directory is written
as ``NAME.partial`` and swapped in with two renames; ``last_good`` finds the previous one when a
crash fell between them.

A save that fails (a full disk, a quota, a permission) raises :class:`CheckpointSaveError` naming the path, the
size of the checkpoint and the free space, removes its partial files and keeps the previous checkpoint; on several
processes every rank raises the same error (:func:`save_together`), so no rank waits for one that gave up.
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from pathlib import Path
from typing import Callable

import torch
import torch.distributed as dist
from lightning.pytorch.plugins.io import TorchCheckpointIO

from datamodules.errors import Sapiens2FTError
from sapiens2_ft.training.run_dir import resume_hint

HINTS = {errno.ENOSPC: "free some space or give --run_dir on a larger file system",
         errno.EDQUOT: "the disk quota is used up: free some of it or give --run_dir elsewhere",
         errno.EACCES: "this user may not write there: fix the permissions or give another --run_dir",
         errno.EROFS: "the file system is read-only: give --run_dir on a writable one"}


class CheckpointSaveError(Sapiens2FTError, RuntimeError):
    """A checkpoint could not be written; the message names the path, the bytes and the free space."""


def checkpoint_bytes(checkpoint) -> int:
    """The bytes of the tensors in a (nested) checkpoint held by this process (each storage counted once)."""
    seen, total, stack = set(), 0, [checkpoint]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            stack.extend(item.values())
        elif isinstance(item, (list, tuple)):
            stack.extend(item)
        elif isinstance(item, torch.Tensor):
            local = item.to_local() if hasattr(item, "to_local") else item  # a DTensor's shard
            storage = local.untyped_storage()
            if storage.data_ptr() not in seen or not storage.data_ptr():
                seen.add(storage.data_ptr())
                total += storage.nbytes()
    return total


def _size(n: int) -> str:
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit} ({n:,} bytes)"
    return f"{n} bytes"


def os_error_of(err: BaseException) -> OSError | None:
    """The OSError behind ``err``: itself, its cause or context (torch.save reports a failed write as a
    RuntimeError of its zip writer), or a rank's failure inside a distributed checkpoint's exception."""
    seen = set()
    todo = [err]
    while todo:
        item = todo.pop()
        if item is None or id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, OSError):
            return item
        todo += [item.__cause__, item.__context__]
        todo += [f[0] if isinstance(f, tuple) else f for f in (getattr(item, "failures", None) or {}).values()]
    return None


def free_space(path: Path) -> tuple[Path, int]:
    """The nearest existing folder above ``path`` and the bytes free on its file system."""
    existing = Path(path).absolute().parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    return existing, shutil.disk_usage(existing).free


def save_error_message(path: Path, err: BaseException, size: int, free: tuple[Path, int] | None = None) -> str:
    """``cannot write checkpoint PATH: REASON; the checkpoint is SIZE, FREE free on DIR (HINT); ...``; ``free``
    (:func:`free_space`) is measured now unless given."""
    os_error = os_error_of(err)
    if os_error is not None and os_error.errno is not None:
        reason = f"{os.strerror(os_error.errno)} ({errno.errorcode.get(os_error.errno, os_error.errno)})"
    else:
        reason = f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    existing, free = free or free_space(path)
    hint = HINTS.get(getattr(os_error, "errno", None))
    return (f"cannot write checkpoint {path}: {reason}; the checkpoint is {_size(size)}, {_size(free)} free on "
            f"{existing}" + (f" ({hint})" if hint else "") + "; the previous checkpoint is kept, no partial file "
            f"is left (continue with {resume_hint(_run_dir_of(Path(path)))})")


def _run_dir_of(checkpoint: Path) -> Path:
    """The run directory of a checkpoint in ``<run_dir>/checkpoints/`` (else the checkpoint's folder)."""
    return checkpoint.parent.parent if checkpoint.parent.name == "checkpoints" else checkpoint.parent


class _RecordingWriter:
    """A file's ``write`` that keeps the first OSError it raised (torch.save reports it as a RuntimeError)."""

    def __init__(self, f):
        self.f, self.error = f, None

    def write(self, data) -> int:
        try:
            return self.f.write(data)
        except OSError as err:
            self.error = self.error or err
            raise

    def flush(self) -> None:
        self.f.flush()


def _fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class AtomicCheckpointIO(TorchCheckpointIO):
    """``torch.save`` into ``.NAME.tmp-PID`` beside the target, ``fsync``, then rename over the target."""

    def save_checkpoint(self, checkpoint: dict, path, storage_options=None) -> None:
        path = Path(path)
        temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        writer = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with open(temporary, "wb") as f:
                writer = _RecordingWriter(f)
                self._write(checkpoint, writer)
                f.flush()
                os.fsync(f.fileno())
            if path.is_dir():  # a sharded checkpoint of an earlier run with another strategy
                _remove(path)
            os.replace(temporary, path)
            _fsync_dir(path.parent)
        except Exception as err:
            cause = (writer.error if writer is not None else None) or err
            _unlink_quietly(temporary)  # before the free space is measured
            raise CheckpointSaveError(save_error_message(path, cause, checkpoint_bytes(checkpoint))) from err
        finally:
            _unlink_quietly(temporary)
        for stale in path.parent.glob(f".{path.name}.tmp-*"):  # left by a process killed while saving
            stale.unlink(missing_ok=True)

    def _write(self, checkpoint: dict, f) -> None:
        torch.save(checkpoint, f)


def save_together(strategy, path: Path, save: Callable[[], None], size: int) -> None:
    """Run ``save`` (this rank's part of writing ``path``, ``size`` bytes) and then agree with every rank on whether
    any failed: if one did, every rank raises the same :class:`CheckpointSaveError` (the first failed rank's
    reason, the bytes of all ranks) instead of some waiting in a collective for one that gave up."""
    from torch.distributed.checkpoint.api import CheckpointException  # a BaseException

    failure = None
    try:
        save()
    except (Exception, CheckpointException) as err:  # not KeyboardInterrupt
        failure = err
    if not (dist.is_available() and dist.is_initialized()) or strategy.world_size == 1:
        if isinstance(failure, CheckpointSaveError):
            raise failure
        if failure is not None:
            raise CheckpointSaveError(save_error_message(path, failure, size)) from failure
        return
    report = None
    if failure is not None:
        report = str(failure) if isinstance(failure, CheckpointSaveError) else save_error_message(path, failure, size)
    # a distributed checkpoint's exception reaches every rank and names the ranks that failed
    ranks = sorted(getattr(failure, "failures", None) or [strategy.global_rank])
    # the failed rank's free space goes with its report: measured again on every rank, the figures would differ
    reports: list = [None] * strategy.world_size
    dist.all_gather_object(reports, (report, os_error_of(failure) if failure else None, size, ranks,
                                     free_space(path) if failure else None))
    failed = [r for r in reports if r[0] is not None]
    if not failed:
        return
    report, os_error, _, ranks, free = failed[0]
    total = sum(r[2] for r in reports)
    message = save_error_message(path, os_error, total, free) if os_error is not None else report
    raise CheckpointSaveError(f"rank {', '.join(map(str, ranks))}: {message}") from failure


def swap_in_directory(partial: Path, path: Path) -> None:
    """Replace ``path`` (a directory, or a file from an earlier single-file run) by the complete directory
    ``partial``. At every moment ``path`` or ``path.old`` holds a whole checkpoint: when an earlier crash
    left only ``path.old``, it stays until ``partial`` has become ``path``."""
    old = path.with_name(path.name + ".old")
    if path.exists():
        _remove(old)  # stale: path is the good one
        os.replace(path, old)
    os.replace(partial, path)
    _fsync_dir(path.parent)
    _remove(old)


def _unlink_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):  # the error that got us here is the one to report
        path.unlink(missing_ok=True)


def _remove(path: Path) -> None:
    if path.is_dir():
        shutil.rmtree(path)
    elif path.exists():
        path.unlink()


def last_good(path: Path) -> Path | None:
    """``path`` if it exists, else the previous directory checkpoint a crash left as ``path.old``."""
    if path.exists():
        return path
    old = path.with_name(path.name + ".old")
    return old if old.exists() else None


def agree_on_failed_saves(strategy) -> None:
    """Make a strategy's rank-0-only saves (DDP, or FSDP2 consolidating into one file) fail on every rank when
    rank 0's write fails, instead of leaving the other ranks in the barrier after the save. Strategies that do
    this themselves say so with ``agrees_on_failed_saves = True`` (``FSDP2Strategy``)."""
    if getattr(strategy, "agrees_on_failed_saves", False):
        return
    strategy.save_checkpoint = _SaveTogether(strategy, strategy.save_checkpoint)


class _SaveTogether:
    """``strategy.save_checkpoint`` through :func:`save_together` (a class, not a closure: spawned ranks pickle it)."""

    def __init__(self, strategy, save: Callable):
        self.strategy, self.save = strategy, save

    def __call__(self, checkpoint: dict, filepath, storage_options=None) -> None:
        size = checkpoint_bytes(checkpoint) if self.strategy.is_global_zero else 0
        save_together(self.strategy, Path(filepath), lambda: self.save(checkpoint, filepath, storage_options), size)
