"""Paths inside a folder: what an annotation file or a handed folder names stays inside it.

An annotation file from someone else may name ``../../secret.png`` or ``/home/you/private.png``; a handed export may
hold a symbolic link named like its model file that leads to ``~/.cache/huggingface/token``. :func:`inside` gives
the path only when it stays inside the folder, decided before anything is read, so neither the data nor whether
such a file exists leaves it; :func:`handed_file` refuses every symbolic link on the way.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from datamodules.errors import RefusedInput


def inside(root: Path, path: Path | str, follow_links: bool = False) -> Path | None:
    """``path`` (absolute, or relative to the working directory as ``root`` is) as ``root / RELATIVE`` when it lies
    inside ``root`` after ``..`` are resolved, else None. ``follow_links``: also where symbolic links lead (for a
    folder from someone else, such as a tool's export; a dataset's own links, set up by its user, are followed
    anyway)."""
    base = Path(os.path.normpath(Path(root).absolute()))
    target = Path(os.path.normpath(Path(path).absolute()))
    if not target.is_relative_to(base):
        return None
    if follow_links and not target.resolve().is_relative_to(base.resolve()):
        return None
    return Path(root) / target.relative_to(base)


def relative_name(name: str, what: str) -> str:
    """``name`` as a relative POSIX path, none of whose parts is empty, ``.`` or ``..``."""
    parts = str(name).split("/")
    if not name or str(name).startswith("/") or "\0" in str(name) or any(p in ("", ".", "..") for p in parts):
        raise RefusedInput(f"{what}: {name!r} is not a relative file name inside its folder")
    return "/".join(parts)


def link_on_the_way(root: Path, name: str) -> Path | None:
    """The first symbolic link among ``root / name``'s parts below ``root`` (None: no link there)."""
    path = Path(root)
    for part in relative_name(name, str(root)).split("/"):
        path = path / part
        try:
            if stat.S_ISLNK(os.lstat(path).st_mode):
                return path
        except FileNotFoundError:
            return None
    return None


def handed_file(root: Path, name: str) -> Path:
    """``root / name`` when it is a regular file reached through no symbolic link (``RefusedInput`` naming the
    link or the special file otherwise; ``FileNotFoundError`` when it is missing). For folders handed by others:
    exports, Spaces' models, downloaded caches."""
    link = link_on_the_way(root, name)
    if link is not None:
        raise RefusedInput(f"{link} is a symbolic link (to {os.readlink(link)}); links in a folder from someone "
                           "else are not followed: replace it with the file itself")
    path = Path(root) / name
    mode = os.lstat(path).st_mode
    if not stat.S_ISREG(mode):
        raise RefusedInput(f"{path}: not a regular file; it is not read")
    return path


def files_under(root: Path) -> list[str]:
    """Every regular file under ``root`` as a relative POSIX name, symbolic links (to files or folders) left out
    and not entered."""
    found = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        for name in files:
            path = os.path.join(folder, name)
            if stat.S_ISREG(os.lstat(path).st_mode):
                found.append(Path(path).relative_to(root).as_posix())
    return sorted(found)


def links_under(root: Path) -> list[str]:
    """The symbolic links under ``root`` (relative POSIX names), not entered."""
    found = []
    for folder, dirs, files in os.walk(root, followlinks=False):
        for name in dirs + files:
            path = os.path.join(folder, name)
            if os.path.islink(path):
                found.append(Path(path).relative_to(root).as_posix())
    return sorted(found)


IMAGE_SUFFIXES = (".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff")


def images_under(root: Path) -> list[str]:
    """The image files under a handed folder (``files_under``: symbolic links left out and not entered), by suffix,
    as relative POSIX names; ``NotADirectoryError`` when ``root`` is no folder, a link to one included."""
    if Path(root).is_symlink() or not Path(root).is_dir():
        raise NotADirectoryError(f"{root}: not a folder (a symbolic link to one is not followed)")
    return [name for name in files_under(root) if Path(name).suffix.lower() in IMAGE_SUFFIXES]
