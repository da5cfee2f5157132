"""A synthetic dataset in use is not replaced: readers hold a shared lock, a replacement needs it exclusively.

A run that renders its dataset (``data.synthetic``) into a folder that another run is reading with other
parameters would otherwise swap the files under that run (how a benchmark once killed a running pretraining).
The lock is an ``flock`` on ``.<name>.lock`` beside the dataset folder; it lasts as long as the process that took
it (and its forked data workers). Where ``fcntl`` is missing (Windows) nothing is locked.
"""

from __future__ import annotations

import os
from pathlib import Path

from datamodules.errors import Refused

try:
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None

_HELD: dict[Path, int] = {}  # dataset folder -> descriptor holding its shared lock (module-level: not pickled)


class DatasetInUseError(Refused, FileExistsError):
    """The dataset to replace is being read by another process."""


def _lock_file(root: Path) -> Path:
    return root.parent / f".{root.name}.lock"


def _open(root: Path) -> int:
    root.parent.mkdir(parents=True, exist_ok=True)
    return os.open(_lock_file(root), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o644)  # a link is not followed


def hold(root: Path) -> None:
    """Mark the dataset at ``root`` as read by this process until it exits (a no-op if it already is)."""
    root = Path(root).absolute()
    if fcntl is None or root in _HELD:
        return
    fd = _open(root)
    fcntl.flock(fd, fcntl.LOCK_SH)
    _HELD[root] = fd


def release(root: Path) -> None:
    """Drop this process's hold on ``root``."""
    fd = _HELD.pop(Path(root).absolute(), None)
    if fd is not None:
        os.close(fd)


class Replacing:
    """``with Replacing(root):`` the dataset at ``root`` is held exclusively; raises :class:`DatasetInUseError`
    at once when another process reads it. This process's own hold is given up: it is the one replacing."""

    def __init__(self, root: Path, describe: str):
        self.root, self.describe, self.fd = Path(root).absolute(), describe, None

    def __enter__(self) -> "Replacing":
        if fcntl is None:
            return self
        release(self.root)
        self.fd = _open(self.root)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(self.fd)
            self.fd = None
            raise DatasetInUseError(
                f"not replacing the synthetic dataset at {self.root} ({self.describe}): another process is "
                f"reading it (a training run or benchmark on that folder). Give this run another data.root, "
                f"or wait until that one ends") from None
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None
