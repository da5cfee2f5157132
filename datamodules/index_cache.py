"""Cached sample indexes: what listing and checking a dataset found, saved once and read back in a second.

A cache file is a numpy ``.npz`` read through the boundary (no pickles, each array's header checked). It lies in
the user's private cache (``boundary/cache.py``: ``$SAPIENS2_FT_CACHE/index``, or ``data.cache_dir``), is named by
a hash of the annotation file's path and of its key, and holds the key, so a key that changed (the annotation
file's size, mtime or content, or an option that changes the index) finds no file or a file that is not used; what
it holds is checked again as the json's own records are (``coco_index.py``). Files are written to a temporary name
and renamed, so that processes building the same index at once (the nodes of a run on a shared disk) never read
half a file.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import numpy as np
from lightning.pytorch.utilities import rank_zero_warn

from datamodules.boundary.arrays import read_npz
from datamodules.boundary.cache import private_folder, user_cache
from datamodules.boundary.files import open_file
from datamodules.boundary.writes import replacing
from datamodules.errors import DataError

VERSION = 2  # raise when what an index holds changes


def fingerprint(path: Path) -> dict:
    """Size, mtime and SHA-256 of a file (0.3 s for 250 MB)."""
    stat = path.stat()
    with open_file(path) as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": digest}


class IndexCache:
    """Where indexes are kept: ``folder`` (made private), else the user's cache (``index``)."""

    def __init__(self, folder: str | Path | None = None):
        self.folder = Path(folder) if folder else None

    def path(self, source: Path, key: dict) -> Path | None:
        """The cache file of ``key`` for the index of ``source``; None, after a warning, when the cache folder cannot
        be made or is not private (the index is then built at every start)."""
        named = {"version": VERSION, "source": str(Path(source).resolve()), **key}
        digest = hashlib.sha256(json.dumps(named, sort_keys=True).encode()).hexdigest()
        try:
            folder = private_folder(self.folder) if self.folder is not None else user_cache("index")
        except (OSError, DataError) as err:
            rank_zero_warn(f"cannot cache the data index ({err}); it is built again at every start. Set "
                           "data.cache_dir to a writable folder of yours")
            return None
        return folder / f"{Path(source).stem}.{digest[:20]}.npz"

    def _read(self, path: Path | None, key: dict, only: tuple[str, ...] | None) -> dict[str, np.ndarray] | None:
        if path is None:
            return None
        try:
            stored = read_npz(path, only=only)
            if json.loads(stored["key"].tobytes()) != {"version": VERSION, **key}:
                return None
        except (OSError, ValueError, KeyError):  # missing, broken, refused (DataError is a ValueError)
            return None
        return stored

    def load(self, path: Path | None, key: dict) -> dict[str, np.ndarray] | None:
        """The arrays saved under ``key`` at ``path``; None when there is no such file or it holds another key."""
        stored = self._read(path, key, None)
        return None if stored is None else {name: array for name, array in stored.items() if name != "key"}

    def holds(self, path: Path | None, key: dict) -> bool:
        """Whether ``path`` holds the index of ``key`` (only the key is read)."""
        return self._read(path, key, ("key",)) is not None

    def save(self, path: Path | None, key: dict, arrays: dict[str, np.ndarray]) -> bool:
        """Write the arrays under ``key``; a folder that cannot be written is a warning (the run goes on)."""
        if path is None:
            return False
        stored = {"key": np.frombuffer(json.dumps({"version": VERSION, **key}).encode(), np.uint8), **arrays}
        try:
            with replacing(path.parent, path.name) as temporary:
                np.savez(temporary, **stored)
        except (OSError, DataError) as err:
            rank_zero_warn(f"cannot cache the data index in {path.parent} ({err}); it is built again at every "
                           "start. Set data.cache_dir to a writable folder")
            return False
        return True


def text_array(value) -> np.ndarray:
    """``value`` as JSON text in a uint8 array (what an ``.npz`` without pickles can hold)."""
    return np.frombuffer(json.dumps(value).encode(), np.uint8)


def from_text_array(array: np.ndarray):
    return json.loads(array.tobytes())
