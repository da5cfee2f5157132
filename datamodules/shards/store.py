"""The files of a shard folder: a local folder, or a URL whose files are downloaded once into a local cache.

A remote folder is ``http(s)://``, ``gs://`` or any URL WebDataset's ``gopen`` opens (``pipe:`` commands too); a
location holding ``{}`` is a template the file name replaces (``pipe:aws s3 cp s3://bucket/shards/{} -``). Each
file is downloaded whole, once per machine (a lock file keeps the loader workers from fetching it twice), into
``cache_dir``; beyond ``cache_gb`` the least recently used shards are deleted (a worker reading one keeps its
open file). Members are read with ``os.pread`` at the offsets of the index, so the workers share no file state.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import tempfile
from pathlib import Path

from datamodules.errors import DataError
from datamodules.file_bytes import StoredFile

MAX_OPEN = 64  # shard files a process keeps open


def is_remote(location: str) -> bool:
    return "://" in location and not location.startswith("file://") or location.startswith("pipe:")


def file_url(location: str, name: str) -> str:
    return location.format(name) if "{}" in location else f"{location.rstrip('/')}/{name}"


def default_cache() -> Path:
    """Downloaded shards go to the machine's temporary folder (node-local on most clusters)."""
    return Path(tempfile.gettempdir()) / "sapiens2_ft_shards"


class ShardStore:
    """Reads the files of the shard folder at ``location`` (a path, ``file://`` path or URL)."""

    def __init__(self, location: str, cache_dir: str | Path | None = None, cache_gb: float = 50.0):
        self.location = str(location)
        self.remote = is_remote(self.location)
        self.folder = Path(self.location.removeprefix("file://")) if not self.remote else None
        digest = hashlib.sha256(self.location.encode()).hexdigest()[:16]
        self.cache = Path(cache_dir) / digest if cache_dir else default_cache() / digest
        self.cache_bytes = int(cache_gb * 2**30)
        self._open: dict[str, int] = {}

    def __getstate__(self) -> dict:  # a spawned worker opens its own files
        return {**self.__dict__, "_open": {}}

    def path(self, name: str) -> Path:
        """A local path of file ``name`` (downloaded first when the folder is remote)."""
        if not self.remote:
            path = self.folder / name
            if not path.is_file():
                raise DataError(f"shard folder {self.location}: file not found: {name}")
            return path
        target = self.cache / name
        if target.is_file():
            return target
        self.cache.mkdir(parents=True, exist_ok=True)
        with open(self.cache / f".{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)  # one download per machine; the others wait and find the file
            if not target.is_file():
                self._download(name, target)
        return target

    def _download(self, name: str, target: Path) -> None:
        from webdataset.gopen import gopen

        url = file_url(self.location, name)
        partial = target.with_name(f".{name}.part")
        try:
            with gopen(url, "rb") as source, open(partial, "wb") as out:
                shutil.copyfileobj(source, out, 2**22)
        except Exception as err:  # gopen's handlers raise their own kinds (a failed curl: OSError, ValueError)
            partial.unlink(missing_ok=True)
            raise DataError(f"cannot download {url} ({type(err).__name__}: {err})") from err
        if partial.stat().st_size == 0:
            partial.unlink()
            raise DataError(f"cannot download {url}: empty or not found")
        os.replace(partial, target)
        self._evict(keep=target)

    def _evict(self, keep: Path) -> None:
        """Delete the least recently used shards while the cache holds more than ``cache_bytes``."""
        files = sorted((p for p in self.cache.glob("*.tar") if p != keep), key=lambda p: p.stat().st_mtime)
        total = sum(p.stat().st_size for p in files) + keep.stat().st_size
        for path in files:
            if total <= self.cache_bytes:
                break
            total -= path.stat().st_size
            path.unlink(missing_ok=True)

    def read(self, shard: str, offset: int, size: int, name: str) -> StoredFile:
        """Member bytes ``[offset, offset + size)`` of ``shard``, named ``name`` (the file it was written from)."""
        fd = self._open.get(shard)
        if fd is None:
            if len(self._open) >= MAX_OPEN:
                os.close(self._open.pop(next(iter(self._open))))
            path = self.path(shard)
            if self.remote:
                os.utime(path)  # recently used: kept by the eviction
            fd = self._open[shard] = os.open(path, os.O_RDONLY)
        data = os.pread(fd, size, offset)
        if len(data) != size:
            raise DataError(f"{file_url(self.location, shard)}: {name}: truncated shard ({len(data)} of {size} bytes)")
        return StoredFile(f"{name} ({shard} in {self.location})", data)
