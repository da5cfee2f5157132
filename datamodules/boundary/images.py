"""Reading the images of a dataset: RGB uint8, with a truncated, undecodable or oversized file reported by name.

Before anything is decoded the size is read from the file's header (PNG, JPEG, BMP, WebP, TIFF; other files are
not decoded), and an image of more than ``SAPIENS2_FT_MAX_IMAGE_PIXELS`` pixels (default 100 megapixels) is
refused: a 110 kB PNG can declare 30000 x 30000 pixels, which decoding would turn into 2.7 GB. The header is read
as the decoder reads it (a TIFF's first directory, the first of a repeated tag), OpenCV's own limit
(``OPENCV_IO_MAX_IMAGE_PIXELS``, set from the same variable before OpenCV loads: ``boundary/__init__.py``) stops
a header that lies before its pixels are allocated, and the decoded size is checked against the limit again.
OpenCV's own errors are caught per file, so one bad file never stops the others.
"""

from __future__ import annotations

import struct
from pathlib import Path

import cv2
import numpy as np

from datamodules.boundary.files import StoredFile, read_head
from datamodules.boundary.files import read_bytes as read_file
from datamodules.boundary.limits import MAX_PIXELS_ENV, OPENCV_ENV, max_pixels, opencv_cap
from datamodules.errors import DataError, RefusedInput

_JPEG_SIZE_MARKERS = {0xC0, 0xC1, 0xC2, 0xC3, 0xC5, 0xC6, 0xC7, 0xC9, 0xCA, 0xCB, 0xCD, 0xCE, 0xCF}


def _jpeg_size(raw: bytes) -> tuple[int, int] | None:
    i = 2
    while i + 9 < len(raw):
        if raw[i] != 0xFF:
            return None
        marker = raw[i + 1]
        if marker == 0xFF:  # fill byte
            i += 1
        elif marker in _JPEG_SIZE_MARKERS:
            height, width = struct.unpack(">HH", raw[i + 5:i + 9])
            return width, height
        elif marker in (0x01, *range(0xD0, 0xD9)):  # no length
            i += 2
        else:
            i += 2 + struct.unpack(">H", raw[i + 2:i + 4])[0]
    return None


def _webp_size(raw: bytes) -> tuple[int, int] | None:
    chunk = raw[12:16]
    if chunk == b"VP8 " and raw[23:26] == b"\x9d\x01\x2a":
        width, height = struct.unpack("<HH", raw[26:30])
        return width & 0x3FFF, height & 0x3FFF
    if chunk == b"VP8L" and raw[20:21] == b"\x2f":
        bits = int.from_bytes(raw[21:25], "little")
        return (bits & 0x3FFF) + 1, ((bits >> 14) & 0x3FFF) + 1
    if chunk == b"VP8X":
        return int.from_bytes(raw[24:27], "little") + 1, int.from_bytes(raw[27:30], "little") + 1
    return None


def _tiff_size(raw: bytes) -> tuple[int, int] | None:
    order = "<" if raw[:2] == b"II" else ">"
    (offset,) = struct.unpack(order + "I", raw[4:8])
    if offset + 2 > len(raw):
        return None
    (count,) = struct.unpack(order + "H", raw[offset:offset + 2])
    found = {}  # libtiff decodes the first directory and keeps the first of a repeated tag: so does this
    for k in range(count):
        entry = raw[offset + 2 + 12 * k:offset + 14 + 12 * k]
        if len(entry) < 12:
            return None
        tag, kind = struct.unpack(order + "HH", entry[:4])
        if tag in (256, 257) and kind in (3, 4) and tag not in found:
            found[tag] = struct.unpack(order + ("H" if kind == 3 else "I"), entry[8:10] if kind == 3 else entry[8:12])[0]
    return (found[256], found[257]) if len(found) == 2 else None


def header_size(raw: bytes) -> tuple[int, int] | None:
    """(width, height) from the header of a PNG, JPEG, BMP, WebP or TIFF file's bytes; None for other bytes."""
    try:
        if raw[:8] == b"\x89PNG\r\n\x1a\n" and raw[12:16] == b"IHDR":
            return struct.unpack(">II", raw[16:24])
        if raw[:2] == b"\xff\xd8":
            return _jpeg_size(raw)
        if raw[:2] == b"BM":
            if struct.unpack("<I", raw[14:18])[0] == 12:  # OS/2 header
                return struct.unpack("<HH", raw[18:22])
            width, height = struct.unpack("<ii", raw[18:26])
            return abs(width), abs(height)
        if raw[:4] == b"RIFF" and raw[8:12] == b"WEBP":
            return _webp_size(raw)
        if raw[:4] in (b"II*\x00", b"MM\x00*"):
            return _tiff_size(raw)
    except struct.error:
        return None
    return None


def check_pixels(size: tuple[int, int], what: str, limit: int | None = None) -> None:
    """The pixel rule: an image of ``size`` (width, height) with more than ``limit`` pixels (default
    :func:`max_pixels`) is a RefusedInput naming ``what``."""
    limit = max_pixels() if limit is None else limit
    if size[0] * size[1] > limit:
        raise RefusedInput(f"image {what}: {size[0]}x{size[1]} pixels, above the limit of {limit:,} "
                           f"(raise it with {MAX_PIXELS_ENV}, or predict --max_pixels, for images you trust)")


def decode(raw: bytes, flags: int, what: str, limit: int | None = None) -> np.ndarray:
    """``cv2.imdecode`` of an image file's bytes once its header allows it (``limit`` pixels, default
    :func:`max_pixels`); a DataError naming ``what`` otherwise."""
    size = header_size(raw)
    if size is None:
        raise DataError(f"cannot read image {what}: missing, truncated or not an image (no PNG, JPEG, BMP, WebP or "
                        "TIFF header)")
    limit = max_pixels() if limit is None else limit
    check_pixels(size, what, limit)
    try:
        image = cv2.imdecode(np.frombuffer(raw, np.uint8), flags)
    except cv2.error as err:
        cap = opencv_cap()
        why = (f"above OpenCV's own limit of {cap:,} pixels ({OPENCV_ENV}: set it, or {MAX_PIXELS_ENV}, before the "
               f"command starts; OpenCV reads it when it loads)"
               if size[0] * size[1] > cap or "CV_IO_MAX_IMAGE_PIXELS" in str(err) else
               "OpenCV: " + " ".join(str(err).split())[-200:])
        raise DataError(f"cannot read image {what}: {why}") from None
    if image is None:
        raise DataError(f"cannot read image {what}: missing, truncated or not an image")
    if image.shape[0] * image.shape[1] > limit:  # a header that lied: decoded, refused all the same
        raise DataError(f"image {what}: {image.shape[1]}x{image.shape[0]} pixels decoded where its header said "
                        f"{size[0]}x{size[1]}, above the limit of {limit:,}")
    return image


def file_size(path) -> tuple[int, int] | None:
    """(width, height) of an image file from its header (None: not an image of a known kind, or unreadable)."""
    try:
        head = read_head(path, 1 << 16)
        return header_size(head) or header_size(read_bytes(path))  # a JPEG's size may follow 64 kB of metadata
    except (OSError, DataError):
        return None


def read_bytes(path: str | Path | StoredFile) -> bytes:
    """The content of an image file, or of a shard member read already (``StoredFile``); empty when it cannot be
    read, which decoding reports as not an image (a special file, or one above the byte limit: ``RefusedInput``)."""
    try:
        return read_file(path)
    except OSError:
        return b""


def read_image(path: str | Path | StoredFile, limit: int | None = None) -> np.ndarray:
    """RGB uint8 image; a missing, undecodable or oversized file (above ``limit`` pixels, default
    :func:`max_pixels`) is a DataError naming it."""
    return decode_rgb(read_bytes(path), str(path), limit)


def decode_rgb(raw: bytes, what: str, limit: int | None = None) -> np.ndarray:
    """RGB uint8 image of an image file's bytes (a file read, an upload): :func:`decode` (the header's pixels
    against ``limit`` first), and a truncated JPEG refused; a DataError naming ``what`` otherwise."""
    image = decode(raw, cv2.IMREAD_COLOR, what, limit)
    # libjpeg decodes a truncated JPEG with only a warning (the missing rows grey): a JPEG must
    # end its last scan (SOS marker FFDA) with an end-of-image marker (FFD9).
    if raw[:2] == b"\xff\xd8" and not raw.rstrip(b"\x00").endswith(b"\xff\xd9"):
        if raw.rfind(b"\xff\xd9") < raw.rfind(b"\xff\xda"):
            raise DataError(f"cannot read image {what}: missing, truncated or not an image")
    return cv2.cvtColor(image, cv2.COLOR_BGR2RGB)
