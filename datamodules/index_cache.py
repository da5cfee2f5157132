"""Cached sample indexes: what listing and checking a dataset found, saved once and read back in a second.

A cache file is a numpy ``.npz`` read with ``allow_pickle=False`` (loading it runs no code). It is named by a
hash of its key and holds the key, so a key that changed (the annotation file's size, mtime or content, or an
option that changes the index) finds no file or a file that is not used. Files are written to a temporary name
and renamed, so that processes building the same index at once (the nodes of a run on a shared disk) never
read half a file.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile
from pathlib import Path

import numpy as np
from lightning.pytorch.utilities import rank_zero_warn

VERSION = 1  # raise when what an index holds changes
FOLDER = ".sapiens2_ft_cache"  # beside the annotation file, unless data.cache_dir names a folder


def fingerprint(path: Path) -> dict:
    """Size, mtime and SHA-256 of a file (0.3 s for 250 MB)."""
    stat = path.stat()
    with open(path, "rb") as f:
        digest = hashlib.file_digest(f, "sha256").hexdigest()
    return {"size": stat.st_size, "mtime_ns": stat.st_mtime_ns, "sha256": digest}


class IndexCache:
    """Where indexes are kept: ``folder``, or a ``.sapiens2_ft_cache`` folder beside each source file."""

    def __init__(self, folder: str | Path | None = None):
        self.folder = Path(folder) if folder else None

    def path(self, source: Path, key: dict) -> Path:
        """The cache file of ``key`` for the index of ``source``."""
        digest = hashlib.sha256(json.dumps({"version": VERSION, **key}, sort_keys=True).encode()).hexdigest()
        folder = self.folder if self.folder is not None else Path(source).parent / FOLDER
        return folder / f"{Path(source).stem}.{digest[:20]}.npz"

    def load(self, path: Path, key: dict) -> dict[str, np.ndarray] | None:
        """The arrays saved under ``key`` at ``path``; None when there is no such file or it holds another key."""
        try:
            with np.load(path, allow_pickle=False) as stored:
                if json.loads(stored["key"].tobytes()) != {"version": VERSION, **key}:
                    return None
                return {name: stored[name] for name in stored.files if name != "key"}
        except (OSError, ValueError, KeyError, zipfile.BadZipFile, json.JSONDecodeError):
            return None

    def holds(self, path: Path, key: dict) -> bool:
        """Whether ``path`` holds the index of ``key`` (only the key is read)."""
        try:
            with np.load(path, allow_pickle=False) as stored:
                return json.loads(stored["key"].tobytes()) == {"version": VERSION, **key}
        except (OSError, ValueError, KeyError, zipfile.BadZipFile, json.JSONDecodeError):
            return False

    def save(self, path: Path, key: dict, arrays: dict[str, np.ndarray]) -> bool:
        """Write the arrays under ``key``; a folder that cannot be written is a warning (the run goes on)."""
        stored = {"key": np.frombuffer(json.dumps({"version": VERSION, **key}).encode(), np.uint8), **arrays}
        temporary = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp",
                                             delete=False) as f:
                temporary = f.name
                np.savez(f, **stored)
            os.replace(temporary, path)
        except OSError as err:
            if temporary is not None:
                Path(temporary).unlink(missing_ok=True)
            rank_zero_warn(f"cannot cache the data index in {path.parent} ({err}); it is built again at every "
                           "start. Set data.cache_dir to a writable folder")
            return False
        return True


def text_array(value) -> np.ndarray:
    """``value`` as JSON text in a uint8 array (what an ``.npz`` without pickles can hold)."""
    return np.frombuffer(json.dumps(value).encode(), np.uint8)


def from_text_array(array: np.ndarray):
    return json.loads(array.tobytes())
