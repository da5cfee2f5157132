"""Writing into a folder a user names: a file is written under a new name and renamed over its own (a rename
replaces a symbolic link; it never writes through it), every folder on the way is a real folder of that folder
(a link named like a subfolder is refused), and a half-written file never shows. Code that writes by path
(``save_pretrained``, the ONNX exporter, a video writer) writes into :func:`staged` or :func:`replacing`."""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import stat
import tempfile
from pathlib import Path
from typing import Iterator

import cv2
import numpy as np

from datamodules.boundary.folders import link_on_the_way, relative_name
from datamodules.errors import RefusedInput


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


FILE_MODE = 0o666 & ~_umask()  # what open() would have given a new file


def target(folder: str | Path, name: str) -> Path:
    """``folder / name`` with the folders on the way created; ``RefusedInput`` when one of those folders is a
    symbolic link, or ``name`` a folder (a link at ``name`` itself is replaced by the new file, not written
    through)."""
    folder = Path(folder)
    name = relative_name(name, str(folder))
    link = link_on_the_way(folder, name)
    if link is not None and link != folder / name:
        raise RefusedInput(f"{link} is a symbolic link; nothing is written through a link in {folder} (remove it, "
                           "or write to a new folder)")
    path = folder / name
    path.parent.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISDIR(os.lstat(path).st_mode):
            raise RefusedInput(f"{path} is a folder; cannot write a file there")
    return path


@contextlib.contextmanager
def replacing(folder: str | Path, name: str) -> Iterator[Path]:
    """A new, empty temporary path beside ``folder / name`` to write by path; renamed over ``name`` when the block
    ends without an error, removed otherwise. The suffix is ``name``'s (writers choose a format by it)."""
    path = target(folder, name)
    fd, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=path.suffix or ".tmp")
    os.close(fd)
    try:
        yield Path(temporary)
        os.chmod(temporary, FILE_MODE)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_bytes(folder: str | Path, name: str, data: bytes) -> Path:
    """``folder / name`` holding ``data``, replaced whole."""
    with replacing(folder, name) as temporary:
        temporary.write_bytes(data)
    return Path(folder) / name


def write_text(folder: str | Path, name: str, text: str) -> Path:
    return write_bytes(folder, name, text.encode("utf-8"))


def write_json(folder: str | Path, name: str, data, indent: int | None = None) -> Path:
    return write_text(folder, name, json.dumps(data, indent=indent) + ("\n" if indent else ""))


def write_image(folder: str | Path, name: str, image: np.ndarray) -> Path:
    """An image (BGR, as OpenCV writes it) encoded by ``name``'s suffix; ``OSError`` when it cannot be."""
    return write_bytes(folder, name, encode_image(name, image))


def write_array(folder: str | Path, name: str, array: np.ndarray) -> Path:
    """An ``.npy`` file of ``array`` (no pickles)."""
    return write_bytes(folder, name, encode_array(array))


def encode_image(name: str, image: np.ndarray) -> bytes:
    """The bytes ``write_image`` writes as ``name`` (encoded by its suffix, default PNG); ``OSError`` when it cannot
    be encoded. The server answers a file with these bytes (``sapiens2_ft/serve``)."""
    ok, encoded = cv2.imencode(Path(name).suffix or ".png", np.ascontiguousarray(image))
    if not ok:
        raise OSError(f"cannot encode {name} as {Path(name).suffix}")
    return encoded.tobytes()


def encode_array(array: np.ndarray) -> bytes:
    """The bytes of ``write_array``'s ``.npy`` file of ``array`` (no pickles)."""
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()


PLY_VERTEX = np.dtype([("x", "<f4"), ("y", "<f4"), ("z", "<f4"), ("red", "u1"), ("green", "u1"), ("blue", "u1")])


def ply_bytes(points: np.ndarray, colours: np.ndarray, comments: tuple[str, ...] = ()) -> bytes:
    """A coloured point cloud as a binary little-endian PLY: ``points`` (N, 3) float XYZ stored as float32,
    ``colours`` (N, 3) uint8 RGB, one ``comment`` header line each (single-line ASCII). Binary: 15 bytes a point (an
    ASCII PLY takes about 40) read by MeshLab, CloudCompare, Open3D and Blender alike."""
    points, colours = np.asarray(points), np.asarray(colours)
    if points.ndim != 2 or points.shape[1] != 3 or colours.shape != points.shape or colours.dtype != np.uint8:
        raise ValueError(f"a point cloud is (N, 3) points and (N, 3) uint8 colours, got {points.shape} and "
                         f"{colours.shape} {colours.dtype}")
    bad = [c for c in comments if not c.isascii() or "\n" in c or "\r" in c]
    if bad:
        raise ValueError(f"PLY comments are single lines of ASCII, got {bad[:3]}")
    vertices = np.empty(len(points), PLY_VERTEX)
    for k, axis in enumerate("xyz"):
        vertices[axis] = points[:, k]
    for k, channel in enumerate(("red", "green", "blue")):
        vertices[channel] = colours[:, k]
    header = ["ply", "format binary_little_endian 1.0", *(f"comment {c}" for c in comments),
              f"element vertex {len(points)}", *(f"property float {a}" for a in "xyz"),
              *(f"property uchar {c}" for c in ("red", "green", "blue")), "end_header", ""]
    return "\n".join(header).encode("ascii") + vertices.tobytes()


def copy_file(source: str | Path, folder: str | Path, name: str) -> Path:
    """A copy of the regular file ``source`` (a link or special file is refused: ``handed_file`` it first) at
    ``folder / name``, streamed (a model's weights are not held in memory)."""
    from datamodules.boundary.files import open_file

    with open_file(source) as f, replacing(folder, name) as temporary:
        with open(temporary, "wb") as out:
            shutil.copyfileobj(f, out, 1 << 22)
    return Path(folder) / name


@contextlib.contextmanager
def staged(folder: str | Path) -> Iterator[Path]:
    """A new private folder inside ``folder`` to write by path (``save_pretrained``); when the block ends without
    an error, each file in it is renamed over the file of the same name in ``folder`` (:func:`target`'s checks),
    and the stage removed either way."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    stage = Path(tempfile.mkdtemp(dir=folder, prefix=".staged-"))
    try:
        yield stage
        for dirpath, _, files in os.walk(stage):
            for file in files:
                name = (Path(dirpath) / file).relative_to(stage).as_posix()
                os.chmod(stage / name, FILE_MODE)
                os.replace(stage / name, target(folder, name))
    finally:
        shutil.rmtree(stage, ignore_errors=True)
