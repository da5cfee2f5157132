"""Reading the images of a dataset: RGB uint8, with a truncated or undecodable file reported by name."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np

from datamodules.errors import DataError
from datamodules.file_bytes import StoredFile, read_bytes


def read_image(path: str | Path | StoredFile) -> np.ndarray:
    """RGB uint8 image; a missing or undecodable file is a DataError naming it."""
    try:
        raw = read_bytes(path)
    except OSError:
        raw = b""
    image = cv2.imdecode(np.frombuffer(raw, np.uint8), cv2.IMREAD_COLOR) if raw else None
    # libjpeg decodes a truncated JPEG with only a warning (the missing rows grey): a JPEG must
    # end its last scan (SOS marker FFDA) with an end-of-image marker (FFD9).
    if image is not None and raw[:2] == b"\xff\xd8" and not raw.rstrip(b"\x00").endswith(b"\xff\xd9"):
        if raw.rfind(b"\xff\xd9") < raw.rfind(b"\xff\xda"):
            image = None
    if image is None:
        raise DataError(f"cannot read image {path} (missing, truncated or not an image)")
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
