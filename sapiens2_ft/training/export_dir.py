"""An export's folder: what an export wrote there is recorded, so that nothing else in it is replaced or uploaded.

Every export lists the files it wrote in ``DIR/export_manifest.json``. Exporting into a folder that holds files
no export wrote is refused unless ``overwrite``; an earlier export's files are replaced. With ``overwrite`` the
export replaces its own files and files of the same names; the folder's other files stay. ``push_to_hub``
uploads the listed files only (a folder without a list: the names an export writes, :data:`EXPORT_PATTERNS`).
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
from pathlib import Path
from typing import Iterator

MANIFEST_FILE = "export_manifest.json"
EXPORT_PATTERNS = ("config.json", "*.safetensors", "model.safetensors.index.json", "preprocessor_config.json",
                   "keypoints.yaml", "model.onnx", "model.onnx.data", "onnx_config.json", "README.md",
                   "LICENSE-sapiens2.md", "predictions.png")


class ExportFolderError(ValueError):
    """The folder asked for holds files an export did not write; the message lists some and says what to do."""


def _files(directory: Path) -> dict[str, tuple[int, int, int]]:
    """Every file under ``directory`` (relative POSIX path) with what tells a rewritten one apart."""
    if not directory.is_dir():
        return {}
    return {p.relative_to(directory).as_posix(): (s.st_ino, s.st_mtime_ns, s.st_size)
            for p in directory.rglob("*") if p.is_file() and (s := p.stat())}


def recorded_files(directory: Path) -> list[str] | None:
    """The files an export recorded writing into ``directory`` (None: no record there)."""
    try:
        names = json.loads((Path(directory) / MANIFEST_FILE).read_text()).get("files")
    except (OSError, ValueError, AttributeError):
        return None
    return [n for n in names if isinstance(n, str)] if isinstance(names, list) else None


def export_files(directory: Path) -> list[str]:
    """The files of ``directory`` an export wrote: its record, else those named as an export names them."""
    present = set(_files(Path(directory)))
    recorded = recorded_files(directory)
    if recorded is not None:
        return sorted(present & set(recorded))
    return sorted(n for n in present if any(fnmatch.fnmatch(n, p) for p in EXPORT_PATTERNS))


def check_folder(out: Path, overwrite: bool) -> None:
    """Refuse ``out`` when it is a file, or (without ``overwrite``) a folder holding files no export wrote."""
    out = Path(out)
    if out.exists() and not out.is_dir():
        raise ExportFolderError(f"--out {out} is a file; give a folder")
    others = sorted(set(_files(out)) - set(recorded_files(out) or []) - {MANIFEST_FILE})
    if others and not overwrite:
        more = f" and {len(others) - 5} more" if len(others) > 5 else ""
        raise ExportFolderError(
            f"--out {out} holds files an export did not write ({', '.join(others[:5])}{more}); give a new or empty "
            "folder, or --overwrite to replace the export's files there (the other files stay)")


def remove_earlier_export(out: Path) -> None:
    """Delete the files an earlier export recorded in ``out`` (a new one replaces them)."""
    for name in recorded_files(out) or []:
        path = Path(out) / name
        if path.resolve().is_relative_to(Path(out).resolve()):
            path.unlink(missing_ok=True)


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
    (out / MANIFEST_FILE).write_text(json.dumps({"files": files}, indent=2) + "\n")
