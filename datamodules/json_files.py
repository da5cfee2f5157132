"""Annotation JSON files, refused unread above a size limit.

A JSON file is read whole, and Python's objects take several times its size in memory: a file of more than
``SAPIENS2_FT_MAX_JSON_BYTES`` bytes (default :data:`MAX_JSON_BYTES`, 2 GiB: the largest public keypoint
annotation files, COCO-WholeBody's, are about 1.4 GB) is refused before anything is read.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from datamodules.errors import DataError

MAX_JSON_BYTES = 2 << 30
MAX_JSON_ENV = "SAPIENS2_FT_MAX_JSON_BYTES"


def check_json_size(path: str | Path) -> None:
    """DataError when the file at ``path`` is larger than the limit (a missing file passes: its reader says so)."""
    try:
        limit = int(float(os.environ.get(MAX_JSON_ENV) or MAX_JSON_BYTES))
    except ValueError:
        raise DataError(f"{MAX_JSON_ENV}={os.environ[MAX_JSON_ENV]!r}: give a number of bytes") from None
    try:
        size = Path(path).stat().st_size
    except OSError:
        return
    if size > limit:
        raise DataError(f"{path} is {size:,} bytes, above the limit of {limit:,} for a JSON file (raise it with "
                        f"{MAX_JSON_ENV} for a file you trust)")


def read_json(path: str | Path):
    """The data of a JSON file no larger than the limit."""
    check_json_size(path)
    return json.loads(Path(path).read_text())
