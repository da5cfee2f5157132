"""File readers and array conversions the dense target specs share; a file's problem is a DataError naming it."""

from __future__ import annotations

import io
from pathlib import Path

import cv2
import numpy as np
import torch

from datamodules.boundary.arrays import read_npy as read_array
from datamodules.boundary.files import StoredFile
from datamodules.boundary.files import read_text as read_text_file
from datamodules.boundary.images import decode, read_bytes
from datamodules.dense.target_spec import Attempt
from datamodules.errors import DataError


def check_size(array: np.ndarray, shape: tuple[int, int], path: Path) -> np.ndarray:
    """``array`` when its height and width are ``shape`` (its image's), else a DataError."""
    if array.shape[:2] != tuple(shape):
        raise DataError(f"{path}: size {array.shape[1]}x{array.shape[0]} (WxH) differs from its image "
                        f"{shape[1]}x{shape[0]}")
    return array


def read_png(path: Path | StoredFile, flags: int) -> np.ndarray:
    """A target image (``cv2`` ``flags``; a file or a shard member) that raises a DataError for a missing,
    undecodable or oversized file."""
    return decode(read_bytes(path), flags, str(path))


def read_npy(path: Path | StoredFile) -> np.ndarray:
    """An ``.npy`` target (``boundary.arrays``: no pickles, its header checked) or a DataError naming the file."""
    try:
        return read_array(path)
    except OSError as err:
        raise DataError(f"cannot read {path} ({type(err).__name__}: {err})") from err


def read_text(path: Path | StoredFile) -> io.StringIO:
    """A text file's content to parse (``np.loadtxt``)."""
    return io.StringIO(read_text_file(path))


def load_mask(path: Path | None, shape) -> np.ndarray:
    """HxW bool valid-pixel mask (> 127); all True when ``path`` is None."""
    if path is None:
        return np.ones(shape, dtype=bool)
    mask = check_size(read_png(path, cv2.IMREAD_GRAYSCALE), shape, path)
    return mask > 127


def valid_mask(files: dict[str, Path], shape, attempt: Attempt) -> np.ndarray:
    """The optional ``mask`` file of a sample; every pixel valid without one (or, checking, when it is bad)."""
    mask = attempt("mask", lambda: load_mask(files["mask"], shape)) if "mask" in files else None
    return mask if mask is not None else load_mask(None, shape)


def chw(array: np.ndarray) -> torch.Tensor:
    """HxWxC numpy array -> (C, H, W) tensor."""
    return torch.from_numpy(np.ascontiguousarray(array.transpose(2, 0, 1)))
