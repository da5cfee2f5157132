"""The files of a shard folder: a local folder, or a URL whose files are downloaded once into a local cache.

A remote folder is an ``https://``, ``http://``, ``s3://`` or ``gs://`` URL (``boundary/urls.py``: no other scheme,
no shell); a location holding ``{}`` is a template the file name replaces (``s3://bucket/shards/{}``). Each file
is downloaded whole, once per machine (a lock file keeps the loader workers from fetching it twice), into a
private folder of the user's cache (``boundary/cache.py``), or of ``cache_dir``; beyond ``cache_gb`` the least
recently used shards are deleted (a worker reading one keeps its open file). A cached file is read as a handed
one: a regular file, no link. Members are read with ``os.pread`` at the offsets of the index, so the workers share
no file state.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from datamodules.boundary.cache import fetch_into, private_folder, user_cache
from datamodules.boundary.files import StoredFile, open_file
from datamodules.boundary.folders import inside
from datamodules.boundary.limits import max_file_bytes, max_json_bytes
from datamodules.boundary.urls import download, file_url, scheme_of
from datamodules.errors import DataError, RefusedInput

MAX_OPEN = 64  # shard files a process keeps open
INDEX_FILES = ("index.json", "index.npz")  # limited like annotation files; a shard by the cache's size


def is_remote(location: str) -> bool:
    """Whether ``location`` is a URL (``RefusedInput`` for a scheme that is not read)."""
    return scheme_of(str(location)) is not None


class ShardStore:
    """Reads the files of the shard folder at ``location`` (a path, ``file://`` path or URL)."""

    def __init__(self, location: str, cache_dir: str | Path | None = None, cache_gb: float = 50.0):
        self.location = str(location)
        self.remote = is_remote(self.location)
        self.folder = Path(self.location.removeprefix("file://")) if not self.remote else None
        self.cache_dir = cache_dir
        self.cache_bytes = int(cache_gb * 2**30)
        self._open: dict[str, int] = {}

    def __getstate__(self) -> dict:  # a spawned worker opens its own files
        return {**self.__dict__, "_open": {}}

    @property
    def cache(self) -> Path:
        """This location's private folder in the cache (created on first use)."""
        digest = hashlib.sha256(self.location.encode()).hexdigest()[:16]
        base = private_folder(self.cache_dir) if self.cache_dir else user_cache("shards")
        return private_folder(base / digest)

    def path(self, name: str) -> Path:
        """A local path of file ``name`` (downloaded first when the folder is remote): a regular file inside the
        folder (a link leading out of a local folder, or any link in the cache, is refused)."""
        if not self.remote:
            path = inside(self.folder, self.folder / name, follow_links=True)
            if path is None:
                raise RefusedInput(f"shard folder {self.location}: {name} leads outside the folder")
            if not path.is_file():
                raise DataError(f"shard folder {self.location}: file not found: {name}")
            return path
        cache = self.cache
        url = file_url(self.location, name)
        limit = max_json_bytes() if name in INDEX_FILES else self.cache_bytes
        fetched = []

        def fetch(out) -> int:
            size = download(url, out, limit)
            if size == 0:
                raise DataError(f"cannot download {url}: empty or not found")
            fetched.append(name)
            return size

        path = fetch_into(cache, name, fetch)
        if fetched:
            self._evict(cache, keep=path)
        return path

    def _evict(self, cache: Path, keep: Path) -> None:
        """Delete the least recently used shards while the cache holds more than ``cache_bytes``."""
        files = sorted((p for p in cache.glob("*.tar") if p != keep), key=lambda p: p.stat().st_mtime)
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
            with open_file(path) as f:
                fd = self._open[shard] = os.dup(f.fileno())
        if not 0 <= size <= max_file_bytes():
            raise RefusedInput(f"{self.location}: {name}: a member of {size:,} bytes, above the limit of "
                               f"{max_file_bytes():,} for a file read whole")
        data = os.pread(fd, size, offset)
        if len(data) != size:
            where = file_url(self.location, shard) if self.remote else self.folder / shard
            raise DataError(f"{where}: {name}: truncated shard ({len(data)} of {size} bytes)")
        return StoredFile(f"{name} ({shard} in {self.location})", data)
