"""An export's folder: what an export wrote there is recorded, so that nothing else in it is replaced or uploaded.

Every export lists the files it wrote in ``DIR/export_manifest.json``. Exporting into a folder that holds files
no export wrote is refused unless ``overwrite``; an earlier export's files are replaced. With ``overwrite`` the
export replaces its own files and files of the same names; the folder's other files stay. ``push_to_hub`` and a
Space upload or copy the listed files only (a folder without a list: the names an export writes,
:data:`EXPORT_PATTERNS`). An export folder may come from someone else: a symbolic link among its files is refused
by name (never followed, copied or uploaded), and every write replaces a file, never writes through a link
(``datamodules/boundary``).
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
from pathlib import Path
from typing import Iterator

from datamodules.boundary.files import read_json
from datamodules.boundary.folders import files_under, handed_file, link_on_the_way, links_under
from datamodules.boundary.writes import write_json
from datamodules.errors import Refused, RefusedInput

MANIFEST_FILE = "export_manifest.json"
EXPORT_PATTERNS = ("config.json", "*.safetensors", "model.safetensors.index.json", "preprocessor_config.json",
                   "keypoints.yaml", "model.onnx", "model.onnx.data", "onnx_config.json", "README.md",
                   "LICENSE-sapiens2.md", "predictions.png")


class ExportFolderError(Refused, ValueError):
    """The folder asked for holds files an export did not write; the message lists some and says what to do."""


def _files(directory: Path) -> dict[str, tuple[int, int, int]]:
    """Every regular file under ``directory`` (relative POSIX path; links left out) with what tells a rewritten one
    apart."""
    if not Path(directory).is_dir():
        return {}
    return {name: (s.st_ino, s.st_mtime_ns, s.st_size) for name in files_under(directory)
            if (s := os.lstat(Path(directory) / name))}


def recorded_files(directory: Path) -> list[str] | None:
    """The files an export recorded writing into ``directory`` (None: no record there, or one that is a link)."""
    try:
        names = read_json(handed_file(directory, MANIFEST_FILE)).get("files")
    except (OSError, ValueError, AttributeError):  # missing, not JSON, a link (RefusedInput), not a mapping
        return None
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else None


def _named(name: str) -> bool:
    return any(fnmatch.fnmatch(name, p) for p in EXPORT_PATTERNS)


def export_files(directory: Path) -> list[str]:
    """The files of ``directory`` an export wrote: its record, else those named as an export names them.
    ``RefusedInput`` naming a symbolic link among them (or on the way to one)."""
    directory = Path(directory)
    recorded = recorded_files(directory)
    wanted = (lambda name: name in recorded) if recorded is not None else _named
    for name in links_under(directory):  # named like an export file, or a folder on the way to a recorded one
        if wanted(name) or any(n.startswith(name + "/") for n in recorded or []):
            link = directory / name
            raise RefusedInput(f"{link} is a symbolic link (to {os.readlink(link)}); links in an export folder are "
                               "not followed, copied or uploaded: replace it with the file itself")
    return sorted(name for name in files_under(directory) if wanted(name))


def check_folder(out: Path, overwrite: bool) -> None:
    """Refuse ``out`` when it is a file, or (without ``overwrite``) a folder holding files no export wrote (a
    symbolic link counts as such a file)."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ExportFolderError(f"--out {out} is a file; give a folder")
    present = set(_files(out)) | (set(links_under(out)) if out.is_dir() else set())
    others = sorted(present - set(recorded_files(out) or []) - {MANIFEST_FILE})
    if others and not overwrite:
        more = f" and {len(others) - 5} more" if len(others) > 5 else ""
        raise ExportFolderError(
            f"--out {out} holds files an export did not write ({', '.join(others[:5])}{more}); give a new or empty "
            "folder, or --overwrite to replace the export's files there (the other files stay)")


def remove_earlier_export(out: Path) -> None:
    """Delete the files an earlier export recorded in ``out`` (a new one replaces them); a link is removed, not
    what it leads to."""
    for name in recorded_files(out) or []:
        try:
            link = link_on_the_way(out, name)
        except RefusedInput:  # a name with ".." or absolute: not the export's
            continue
        if link is None or link == Path(out) / name:  # the file, or a link itself (removed, not its target)
            (Path(out) / name).unlink(missing_ok=True)


@contextlib.contextmanager
def recording(out: Path, start: bool = True) -> Iterator[None]:
    """Add the files written or rewritten in ``out`` inside the block to its record. ``start=False`` (files added
    to an exported folder): only where the folder has a record or starts empty, as the others are not all known."""
    out = Path(out)
    before = _files(out)
    keeps_record = start or recorded_files(out) is not None or not before
    yield
    if not keeps_record:
        return
    written = {name for name, stat in _files(out).items() if before.get(name) != stat}
    files = sorted((set(recorded_files(out) or []) | written) - {MANIFEST_FILE})
    write_json(out, MANIFEST_FILE, {"files": files}, indent=2)
