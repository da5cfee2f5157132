"""Paths that annotation files name, kept inside their dataset or export folder.

An annotation file from someone else may name ``../../secret.png`` or ``/home/you/private.png``; :func:`inside`
gives the path only when it stays inside the folder, decided before anything is read, so neither the data nor
whether such a file exists leaves it.
"""

from __future__ import annotations

import os
from pathlib import Path


def inside(root: Path, path: Path | str, follow_links: bool = False) -> Path | None:
    """``path`` (absolute, or relative to the working directory as ``root`` is) as ``root / RELATIVE`` when it lies
    inside ``root`` after ``..`` are resolved, else None. ``follow_links``: also where symbolic links lead (for a folder from
    someone else, such as a tool's export; a dataset's own links, set up by its user, are followed anyway)."""
    base = Path(os.path.normpath(Path(root).absolute()))
    target = Path(os.path.normpath(Path(path).absolute()))
    if not target.is_relative_to(base):
        return None
    if follow_links and not target.resolve().is_relative_to(base.resolve()):
        return None
    return Path(root) / target.relative_to(base)
