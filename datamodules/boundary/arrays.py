"""Numpy arrays from files: ``.npy`` and ``.npz`` read without pickles, each array's header checked against the
bytes that hold it before anything is allocated (a 100-byte ``.npy`` can declare a 240 GB array, a small ``.npz`` a
member that inflates without end), within the byte limit of a file read whole."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np

from datamodules.boundary.files import StoredFile, open_file, read_bytes
from datamodules.boundary.limits import max_file_bytes
from datamodules.errors import DataError, RefusedInput


def _checked(stream, size: int, what: str) -> np.ndarray:
    """The array of ``.npy`` data in ``stream`` of ``size`` bytes, its declared size matching them."""
    headers = {(1, 0): np.lib.format.read_array_header_1_0, (2, 0): np.lib.format.read_array_header_2_0}
    try:
        version = np.lib.format.read_magic(stream)
        if version not in headers:
            raise ValueError(f"format version {version} (1.0 and 2.0 are read)")
        shape, fortran, dtype = headers[version](stream)
    except (ValueError, EOFError) as err:
        raise DataError(f"{what}: not a numpy array file ({err})") from None
    if dtype.hasobject:
        raise RefusedInput(f"{what}: an array of Python objects (it would need pickle); not read")
    declared = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    if declared != size - stream.tell():
        raise DataError(f"{what}: its header declares {shape} {dtype} ({declared:,} bytes), the file holds "
                        f"{size - stream.tell():,}")
    data = bytearray(declared)  # writable, and no second copy
    if stream.readinto(data) != declared:
        raise DataError(f"{what}: truncated")
    array = np.frombuffer(data, dtype=dtype)
    return array.reshape(shape, order="F" if fortran else "C")


def read_npy(path: str | Path | StoredFile) -> np.ndarray:
    """The array of an ``.npy`` file (or shard member); a DataError naming it when it is not one."""
    raw = read_bytes(path)
    return _checked(io.BytesIO(raw), len(raw), str(path))


def read_npz(path: str | Path, limit: int | None = None, only: tuple[str, ...] | None = None
             ) -> dict[str, np.ndarray]:
    """The arrays of an ``.npz`` file of at most ``limit`` bytes once inflated (default: the file limit); ``only``:
    those of these names."""
    limit = max_file_bytes() if limit is None else limit
    with open_file(path) as f:
        try:
            archive = zipfile.ZipFile(f)
        except zipfile.BadZipFile as err:
            raise DataError(f"{path}: not a numpy .npz file ({err})") from None
        with archive:
            members = archive.infolist()
            inflated = sum(m.file_size for m in members)
            if inflated > limit:
                raise RefusedInput(f"{path}: {inflated:,} bytes once inflated, above the limit of {limit:,}")
            arrays = {}
            for member in members:
                if only is not None and member.filename.removesuffix(".npy") not in only:
                    continue
                with archive.open(member) as stream:
                    arrays[member.filename.removesuffix(".npy")] = _checked(stream, member.file_size,
                                                                             f"{path}: {member.filename}")
    return arrays
