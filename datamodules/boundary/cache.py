"""The user's own cache folder: ``$SAPIENS2_FT_CACHE``, else ``$XDG_CACHE_HOME/sapiens2_ft``, else
``~/.cache/sapiens2_ft``. Its folders are created private (0700) and used only while they are the user's own and
writable by no one else, so nobody else on a shared machine can plant a file, a lock or a link in them; what a
cache holds is still checked like fresh data when it is read."""

from __future__ import annotations

import fcntl
import os
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO, Callable

from datamodules.boundary.folders import handed_file
from datamodules.errors import RefusedInput

CACHE_ENV = "SAPIENS2_FT_CACHE"


def cache_root() -> Path:
    if os.environ.get(CACHE_ENV):
        return Path(os.environ[CACHE_ENV])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "sapiens2_ft"


def private_folder(path: str | Path) -> Path:
    """``path`` created with mode 0700 (and its missing parents), or, when it exists, checked: a real folder (not a
    link), owned by this user and not writable by group or others (``RefusedInput`` otherwise)."""
    path = Path(path)
    try:
        path.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        pass
    info = os.lstat(path)
    problem = ("is a symbolic link" if stat.S_ISLNK(info.st_mode) else "is not a folder" if not stat.S_ISDIR(
        info.st_mode) else f"belongs to user id {info.st_uid}, not to you" if info.st_uid != os.geteuid() else
               f"is writable by others (mode {stat.S_IMODE(info.st_mode):o})" if info.st_mode & 0o022 else None)
    if problem:
        raise RefusedInput(f"cache folder {path} {problem}: another user could put files in it; remove it or give "
                           f"another folder (${CACHE_ENV})")
    return path


def user_cache(kind: str) -> Path:
    """The private folder ``kind`` of the user's cache (``shards``, ``index``)."""
    return private_folder(private_folder(cache_root()) / kind)


def fetch_into(cache: Path, name: str, fetch: Callable[[BinaryIO], int]) -> Path:
    """``cache / name`` (a private folder's file), written by ``fetch(file)`` the first time: under a lock, so that
    the processes of one machine fetch it once (the others wait and find it), into a new temporary file renamed
    into place when whole; read back as a handed file (a regular file, no link)."""
    try:
        return handed_file(cache, name)
    except FileNotFoundError:
        pass
    lock = os.open(cache / f".{name}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.lexists(cache / name):
            fd, partial = tempfile.mkstemp(dir=cache, prefix=f".{name}.", suffix=".part")
            try:
                with os.fdopen(fd, "wb") as out:
                    fetch(out)
                os.replace(partial, cache / name)
            except BaseException:
                Path(partial).unlink(missing_ok=True)
                raise
    finally:
        os.close(lock)
    return handed_file(cache, name)
