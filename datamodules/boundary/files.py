"""Reading a file: a regular file only (a FIFO, device or socket is refused before it can block or stream without
end), no larger than its limit (checked on the open file before reading, and again while reading, so a file that
grows cannot pass), as bytes, text, JSON or YAML. A shard member already in memory is a ``StoredFile``."""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import yaml

from datamodules.boundary.limits import TEXT_BYTES, env_of, max_file_bytes, max_json_bytes
from datamodules.errors import DataError, RefusedInput

MAX_YAML_ALIASES = 100  # anchors re-used more than this: a "billion laughs" document, not a keypoint set


@dataclass(frozen=True)
class StoredFile:
    """A file's content held in memory, named like the file it was (``name``: in messages)."""

    name: str
    data: bytes

    def __str__(self) -> str:
        return self.name


def _kind_of(mode: int) -> str:
    for test, name in ((stat.S_ISFIFO, "FIFO"), (stat.S_ISCHR, "character device"), (stat.S_ISBLK, "block device"),
                       (stat.S_ISSOCK, "socket"), (stat.S_ISDIR, "folder")):
        if test(mode):
            return name
    return "special file"


def open_file(path: str | Path) -> BinaryIO:
    """``path`` opened for reading in binary, when it is a regular file (``RefusedInput`` otherwise; ``OSError``
    when it cannot be opened). Opened without blocking, so a FIFO is refused instead of waiting for a writer."""
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        raise RefusedInput(f"{path}: a {_kind_of(mode)}, not a regular file; it is not read")
    os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


KIND_WORDS = {"annotation": "an annotation (JSON, XML) file", "file": "a file read whole"}


def too_large(path, size: int | str, limit: int, kind: str) -> RefusedInput:
    env = env_of(kind)
    how = f" (raise it with {env} for a file you trust)" if env else ""
    size = f"{size:,}" if isinstance(size, int) else size
    return RefusedInput(f"{path} is {size} bytes, above the limit of {limit:,} for "
                        f"{KIND_WORDS.get(kind, f'a {kind} file')}{how}")


def read_bytes(path: str | Path | StoredFile, limit: int | None = None, kind: str = "file") -> bytes:
    """The content of ``path`` (a file, or a ``StoredFile``) of at most ``limit`` bytes (default: ``kind``'s limit:
    ``annotation`` JSON / XML files, else any ``file``)."""
    if limit is None:
        limit = max_json_bytes() if kind == "annotation" else max_file_bytes()
    if isinstance(path, StoredFile):
        if len(path.data) > limit:
            raise too_large(path, len(path.data), limit, kind)
        return path.data
    with open_file(path) as f:
        size = os.fstat(f.fileno()).st_size
        if size > limit:
            raise too_large(path, size, limit, kind)
        data = f.read(size + 1)  # what it holds (never a buffer of the limit's size); then what it grew by, if any
        while size < len(data) <= limit and (more := f.read(min(1 << 20, limit + 1 - len(data)))):
            data += more
    if len(data) > limit:
        raise too_large(path, "more than " + f"{limit:,}", limit, kind)
    return data


def read_head(path: str | Path, count: int) -> bytes:
    """The first ``count`` bytes of the regular file ``path``."""
    with open_file(path) as f:
        return f.read(count)


def read_text(path: str | Path | StoredFile, limit: int = TEXT_BYTES, kind: str = "text") -> str:
    """A UTF-8 text file of at most ``limit`` bytes (a DataError naming it when it is not UTF-8)."""
    data = read_bytes(path, limit, kind)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise DataError(f"{path}: not UTF-8 text ({err})") from None


def read_json(path: str | Path | StoredFile):
    """The data of a JSON file no larger than the annotation limit (``ValueError`` when it is not JSON)."""
    return json.loads(read_bytes(path, kind="annotation"))


def read_yaml(path: str | Path, limit: int = TEXT_BYTES):
    """The data of a small YAML file, read safely (plain data, no tags), with few aliases (``yaml.YAMLError`` when
    it is not YAML)."""
    text = read_text(path, limit, "YAML")
    aliases = sum(isinstance(event, yaml.AliasEvent) for event in yaml.parse(text, Loader=yaml.SafeLoader))
    if aliases > MAX_YAML_ALIASES:
        raise RefusedInput(f"{path}: {aliases} YAML aliases, more than the {MAX_YAML_ALIASES} a recipe or label set "
                           "needs; it is not read")
    return yaml.safe_load(text)
