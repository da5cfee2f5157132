"""Sample tables as numpy columns, so that DataLoader workers share them instead of copying them.

A list of Python objects (dataclasses, dicts, strings) is copied page by page into every forked worker as its
reference counts change (copy-on-read); numpy arrays are not, since reading them writes nothing. MMEngine's
``BaseDataset(serialize_data=True)`` and Detectron2's ``DatasetFromList`` keep their samples the same way.
"""

from __future__ import annotations

from typing import Iterable, Iterator

import numpy as np


def frozen(array: np.ndarray) -> np.ndarray:
    """``array`` made read-only: a write by mistake raises instead of copying the shared pages into a worker."""
    array.setflags(write=False)
    return array


class StringTable:
    """Strings as one UTF-8 byte buffer and an offsets array: string ``i`` is ``prefix`` + ``buffer[offsets[i]:
    offsets[i+1]]`` (``prefix``: a folder the strings are relative to, say)."""

    def __init__(self, buffer: np.ndarray, offsets: np.ndarray, prefix: str = ""):
        if offsets.ndim != 1 or len(offsets) < 1 or offsets[-1] != len(buffer):
            raise ValueError("StringTable: offsets must end at the buffer's length")
        self.buffer, self.offsets = frozen(buffer.astype(np.uint8, copy=False)), frozen(offsets.astype(np.int64))
        self.prefix = prefix

    @classmethod
    def of(cls, strings: Iterable[str]) -> "StringTable":
        encoded = [s.encode() for s in strings]
        offsets = np.zeros(len(encoded) + 1, np.int64)
        np.cumsum([len(e) for e in encoded], out=offsets[1:])
        return cls(np.frombuffer(b"".join(encoded), np.uint8).copy(), offsets)

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, index: int) -> str:
        start, end = self.offsets[index], self.offsets[index + 1]
        return self.prefix + self.buffer[start:end].tobytes().decode()

    def __iter__(self) -> Iterator[str]:
        return (self[i] for i in range(len(self)))

    def arrays(self, name: str) -> dict[str, np.ndarray]:
        """The table as two named arrays (for ``np.savez``; without the prefix); ``from_arrays`` reads them back."""
        return {f"{name}_buffer": self.buffer, f"{name}_offsets": self.offsets}

    @classmethod
    def from_arrays(cls, arrays, name: str, prefix: str = "") -> "StringTable":
        return cls(arrays[f"{name}_buffer"], arrays[f"{name}_offsets"], prefix)
