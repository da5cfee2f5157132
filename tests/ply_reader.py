"""A reader of the point clouds ``predict`` writes (binary little-endian PLY of float x, y, z and uchar red, green,
blue), for the tests: written independently of the writer (the header parsed line by line, the vertex type built from
its ``property`` lines)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

TYPES = {"float": "<f4", "float32": "<f4", "double": "<f8", "uchar": "u1", "uint8": "u1"}


def read_ply(path: Path) -> tuple[np.ndarray, np.ndarray, list[str]]:
    """(points (N, 3) float64, colours (N, 3) uint8 RGB, the header's comments) of the PLY at ``path``."""
    data = Path(path).read_bytes()
    end = data.index(b"end_header\n") + len(b"end_header\n")
    lines = data[:end].decode("ascii").splitlines()
    assert lines[0] == "ply" and lines[1] == "format binary_little_endian 1.0", lines[:2]
    comments = [line[len("comment "):] for line in lines if line.startswith("comment ")]
    count = next(int(line.split()[2]) for line in lines if line.startswith("element vertex "))
    fields = [(line.split()[2], TYPES[line.split()[1]]) for line in lines if line.startswith("property ")]
    vertices = np.frombuffer(data[end:], np.dtype(fields), count=count)
    assert len(data) == end + count * vertices.dtype.itemsize, "bytes after the last vertex"
    points = np.stack([vertices[a].astype(np.float64) for a in "xyz"], axis=1)
    colours = np.stack([vertices[c] for c in ("red", "green", "blue")], axis=1)
    return points, colours, comments


def intrinsics(comments: list[str]) -> dict[str, float]:
    """The ``intrinsics fx .. fy .. cx .. cy ..`` comment as {name: value}."""
    words = next(c for c in comments if c.startswith("intrinsics ")).split()[1:]
    return {name: float(value) for name, value in zip(words[::2], words[1::2])}
