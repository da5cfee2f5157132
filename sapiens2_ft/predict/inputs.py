"""The images to predict on: listed by key (their path relative to ``--input``), read or skipped with a warning."""

from __future__ import annotations

import sys
from pathlib import Path, PurePosixPath

import numpy as np
from tqdm import tqdm

from datamodules.errors import DataError
from datamodules.images import read_image

IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"}


def list_images(path: Path) -> dict[str, Path]:
    """Images by key: the path relative to ``path`` (POSIX), or the file name when ``path`` is one image."""
    if path.is_file():
        return {path.name: path}
    images = sorted(p for p in path.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
    if not images:
        raise SystemExit(f"--input: no images ({', '.join(sorted(IMAGE_SUFFIXES))}) in {path}")
    return {p.relative_to(path).as_posix(): p for p in images}


def output_name(key: str) -> str:
    """An image key without its suffix: the stem of its output files, subfolders kept."""
    return PurePosixPath(key).with_suffix("").as_posix()


def read_or_warn(path: Path) -> np.ndarray | None:
    """The RGB image at ``path``, or None after a warning naming it when it cannot be read."""
    try:
        return read_image(str(path))
    except DataError as err:
        tqdm.write(f"warning: skipped: {err}", file=sys.stderr)
        return None


def read_chunk(items: list[tuple[str, Path]]) -> tuple[list[str], list[np.ndarray], int]:
    """The keys and images of the readable ones of ``items``, and how many were skipped."""
    read = [(key, read_or_warn(path)) for key, path in items]
    kept = [(key, image) for key, image in read if image is not None]
    return [key for key, _ in kept], [image for _, image in kept], len(read) - len(kept)
