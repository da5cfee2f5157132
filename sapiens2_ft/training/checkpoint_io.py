"""Checkpoints written atomically: a crash or a SIGKILL while saving leaves the previous checkpoint whole.

A file is written beside its target under a temporary name, flushed to disk, then renamed over the
target (``os.replace`` is atomic on POSIX file systems). A distributed checkpoint directory is written
as ``NAME.partial`` and swapped in with two renames; ``last_good`` finds the previous one when a
crash fell between them.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO


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
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        try:
            with open(temporary, "wb") as f:
                self._write(checkpoint, f)
                f.flush()
                os.fsync(f.fileno())
            if path.is_dir():  # a sharded checkpoint of an earlier run with another strategy
                _remove(path)
            os.replace(temporary, path)
            _fsync_dir(path.parent)
        finally:
            temporary.unlink(missing_ok=True)
        for stale in path.parent.glob(f".{path.name}.tmp-*"):  # left by a process killed while saving
            stale.unlink(missing_ok=True)

    def _write(self, checkpoint: dict, f) -> None:
        torch.save(checkpoint, f)


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
