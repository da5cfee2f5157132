"""The limits of what is read: pixels of an image, bytes of a file read whole. Each is an environment variable
(the user's, trusted) with a default; a refusal names the variable that raises it."""

from __future__ import annotations

import os

from datamodules.errors import DataError

MAX_PIXELS = 100_000_000  # 12,000 x 8,000: larger than any camera's photo
MAX_PIXELS_ENV = "SAPIENS2_FT_MAX_IMAGE_PIXELS"
MAX_JSON_BYTES = 2 << 30  # COCO-WholeBody's training file, the largest public keypoint file, is about 1.4 GB
MAX_JSON_ENV = "SAPIENS2_FT_MAX_JSON_BYTES"  # every annotation file: JSON, XML, boxes
MAX_FILE_BYTES = 2 << 30  # any other file read whole (an image, a target array, a shard index)
MAX_FILE_ENV = "SAPIENS2_FT_MAX_FILE_BYTES"
TEXT_BYTES = 256 << 20  # small text: keypoint and class sets, label maps, list files, intrinsics (no variable)


def _positive(env: str, default: int, what: str) -> int:
    value = os.environ.get(env)
    if not value:
        return default
    try:
        limit = int(float(value))
    except ValueError:
        limit = 0
    if limit <= 0:
        raise DataError(f"{env}={value!r}: give the largest number of {what}, e.g. {default}")
    return limit


def max_pixels() -> int:
    """The pixel limit of an image: ``SAPIENS2_FT_MAX_IMAGE_PIXELS`` when set, else :data:`MAX_PIXELS`."""
    return _positive(MAX_PIXELS_ENV, MAX_PIXELS, "pixels an image may have")


def max_json_bytes() -> int:
    """The byte limit of an annotation file: ``SAPIENS2_FT_MAX_JSON_BYTES`` when set, else 2 GiB."""
    return _positive(MAX_JSON_ENV, MAX_JSON_BYTES, "bytes of an annotation file")


def max_file_bytes() -> int:
    """The byte limit of any other file read whole: ``SAPIENS2_FT_MAX_FILE_BYTES`` when set, else 2 GiB."""
    return _positive(MAX_FILE_ENV, MAX_FILE_BYTES, "bytes of a file read whole")


def env_of(limit_kind: str) -> str | None:
    return {"annotation": MAX_JSON_ENV, "file": MAX_FILE_ENV}.get(limit_kind)


OPENCV_ENV = "OPENCV_IO_MAX_IMAGE_PIXELS"
OPENCV_DEFAULT = 1 << 30


def cap_decoders() -> None:
    """OpenCV's own pixel limit set to ours (unless the user set it), before OpenCV loads: it reads the variable
    once, when it loads, and then refuses a larger image from its header as its decoder reads it, before its
    pixels are allocated (what a header that lies to this project's reader cannot get past)."""
    try:
        limit = max_pixels()
    except DataError:
        return  # the first read says what is wrong with the variable
    os.environ.setdefault(OPENCV_ENV, str(limit))


def opencv_cap() -> int:
    """OpenCV's pixel limit, as the environment said when this process started reading images."""
    try:
        return int(float(os.environ.get(OPENCV_ENV) or OPENCV_DEFAULT))
    except ValueError:
        return OPENCV_DEFAULT
