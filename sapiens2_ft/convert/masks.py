"""Masks kept as the export encodes them (CVAT run lengths, a LabelMe PNG, a COCO RLE, a colour of a CVAT mask
file) and decoded only when the writer paints one image: memory holds one image's mask at a time, not the
export's. ``pixels`` (the mask's box) is what decoding costs, whatever the length of the encoding: what the
export's budget (``budget.py``) adds up before anything is decoded.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import cv2
import numpy as np
from pycocotools import mask as mask_utils

from datamodules.boundary.images import decode, read_bytes
from datamodules.errors import DataError


@dataclass(frozen=True, eq=False)
class Mask:
    """A mask of ``width`` x ``height`` pixels with its top-left corner at ``offset`` in its image."""

    width: int
    height: int
    offset: tuple[int, int] = (0, 0)

    @property
    def pixels(self) -> int:
        return self.width * self.height

    def decode(self) -> np.ndarray:
        """bool (height, width); ``DataError`` when the encoding is not a mask."""
        raise NotImplementedError


@dataclass(frozen=True, eq=False)
class RunLengths(Mask):
    """CVAT's ``rle``: run lengths over the rows of the box, background first (checked: :func:`run_lengths`)."""

    counts: np.ndarray = None

    def decode(self) -> np.ndarray:
        values = np.arange(len(self.counts)) % 2 == 1
        return np.repeat(values, self.counts).reshape(self.height, self.width)


def run_lengths(text: str, width: int, height: int) -> np.ndarray:
    """The run lengths of CVAT's ``rle`` text (``"3, 5, 2"``) over a ``width`` x ``height`` box (8 bytes a run,
    not a byte a pixel); ``ValueError`` unless they are non-negative integers that fill the box exactly."""
    try:
        counts = np.array([v for v in text.replace(" ", "").split(",") if v], dtype=np.int64)
    except OverflowError:
        raise ValueError("a run length beyond any image") from None
    if (counts < 0).any() or (counts > width * height).any() or int(counts.sum()) != width * height:
        raise ValueError(f"run lengths sum to {int(counts.sum())}, the {width}x{height} box has {width * height} "
                         "pixels")
    return counts


@dataclass(frozen=True, eq=False)
class PngMask(Mask):
    """LabelMe's ``mask``: a PNG of its box, non-zero pixels inside; decoded within ``limit`` pixels."""

    data: bytes = b""
    limit: int = 0

    def decode(self) -> np.ndarray:
        return decode(self.data, cv2.IMREAD_GRAYSCALE, "of the mask", self.limit) > 0


@dataclass(frozen=True, eq=False)
class CocoRle(Mask):
    """A COCO RLE of the whole image (``counts`` compressed by pycocotools), in column-major order."""

    rle: dict | None = None

    def decode(self) -> np.ndarray:
        try:
            return mask_utils.decode(self.rle).astype(bool)
        except (TypeError, ValueError, KeyError) as err:
            raise DataError(f"not an RLE mask ({type(err).__name__}: {err})") from None


@dataclass(frozen=True, eq=False)
class ColourMask(Mask):
    """The pixels of a CVAT mask file (an RGB label map) whose colour is one of ``codes`` (``r << 16 | g << 8 |
    b``)."""

    file: Path | None = None
    codes: tuple[int, ...] = ()

    def decode(self) -> np.ndarray:
        return np.isin(colour_codes(self.file), self.codes)


@lru_cache(maxsize=1)  # the regions of one image share their file: it is decoded once, and one is kept
def colour_codes(file: Path) -> np.ndarray:
    """``r << 16 | g << 8 | b`` per pixel of an RGB mask file, its header checked before decoding."""
    bgr = decode(read_bytes(str(file)), cv2.IMREAD_COLOR, str(file)).astype(np.int32)
    return bgr[..., 2] << 16 | bgr[..., 1] << 8 | bgr[..., 0]


def foreground_corners(mask: Mask) -> np.ndarray:
    """The top-left and bottom-right pixels of the mask's foreground in its image, (2, 2) float (none: (0, 2))."""
    ys, xs = np.nonzero(mask.decode())
    if not len(xs):
        return np.zeros((0, 2))
    x0, y0 = mask.offset
    return np.array([[xs.min() + x0, ys.min() + y0], [xs.max() + x0, ys.max() + y0]], float)
