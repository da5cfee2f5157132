"""A file's bytes, from disk or already in memory (a member of a shard): what the image and target readers read."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class StoredFile:
    """A file's content held in memory, named like the file it was (``name``: in messages)."""

    name: str
    data: bytes

    def __str__(self) -> str:
        return self.name


def file_content(path: str | Path | StoredFile) -> bytes:
    """The content of ``path`` (an ``OSError`` when a file cannot be read)."""
    if isinstance(path, StoredFile):
        return path.data
    with open(path, "rb") as f:
        return f.read()
