"""Videos: a regular file opened with OpenCV's FFmpeg, its frame size checked against the pixel limit before a
frame is decoded (a video is a stream of images: the same limit holds for each)."""

from __future__ import annotations

from pathlib import Path

import cv2

from datamodules.boundary.files import open_file
from datamodules.boundary.limits import MAX_PIXELS_ENV, max_pixels
from datamodules.errors import DataError


class NotAVideo(DataError):
    """OpenCV cannot open the file as a video (missing, not a video, or a codec its build does not decode)."""


def open_video(path: str | Path, limit: int | None = None) -> cv2.VideoCapture:
    """An opened ``cv2.VideoCapture`` of the video file ``path``: ``RefusedInput`` for a special file, ``NotAVideo``
    when it cannot be opened, a DataError when its frames have more than ``limit`` pixels (default: the limit)."""
    open_file(path).close()  # a regular file (OpenCV would wait on a FIFO)
    capture = cv2.VideoCapture(str(path))
    if not capture.isOpened():
        capture.release()
        raise NotAVideo(f"{path}: cannot be read as a video (missing, not a video, or a codec this OpenCV build "
                        "cannot decode)")
    width, height = (int(capture.get(p)) for p in (cv2.CAP_PROP_FRAME_WIDTH, cv2.CAP_PROP_FRAME_HEIGHT))
    limit = max_pixels() if limit is None else limit
    if width * height > limit:
        capture.release()
        raise DataError(f"video {path}: frames of {width}x{height} pixels, above the limit of {limit:,} (raise it "
                        f"with {MAX_PIXELS_ENV} for videos you trust)")
    return capture
