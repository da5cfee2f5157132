"""The images to predict on: listed by key (their path relative to ``--input``), read or skipped with a warning."""

from __future__ import annotations

import sys
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from pathlib import Path
from queue import Queue
from threading import Thread
from typing import Iterable, Iterator, TypeVar

import numpy as np
from tqdm import tqdm

from datamodules.errors import DataError, NotFound, Refused
from datamodules.boundary.images import read_image

T = TypeVar("T")
IMAGE_SUFFIXES = {".jpg", ".jpeg", ".png", ".bmp", ".webp", ".tif", ".tiff"}


def list_images(path: Path) -> dict[str, Path]:
    """Images by key: the path relative to ``path`` (POSIX), or the file name when ``path`` is one image."""
    if path.is_file():
        return {path.name: path}
    images = sorted(p for p in path.rglob("*") if p.suffix.lower() in IMAGE_SUFFIXES)
    if not images:
        raise NotFound(f"--input: no images ({', '.join(sorted(IMAGE_SUFFIXES))}) in {path}")
    return {p.relative_to(path).as_posix(): p for p in images}


def check_out(out: Path, source: Path) -> None:
    """Refuse an output folder that is ``source`` or lies inside it: the outputs would replace or join the inputs."""
    out, source = Path(out).resolve(), Path(source).resolve()
    if out == source or (source.is_dir() and out.is_relative_to(source)):
        raise Refused(f"--out {out} is {'--input' if out == source else 'inside --input ' + str(source)}: the "
                      "outputs would replace or join the images read; give a folder outside --input")


def read_or_warn(path: Path, limit: int | None = None) -> np.ndarray | None:
    """The RGB image at ``path``, or None after a warning naming it when it cannot be read or has more than
    ``limit`` pixels (default: ``datamodules.boundary.limits.max_pixels``)."""
    try:
        return read_image(str(path), limit)
    except DataError as err:
        tqdm.write(f"warning: skipped: {err}", file=sys.stderr)
        return None


def read_chunk(items: list[tuple[str, Path]], pool: ThreadPoolExecutor | None = None, limit: int | None = None
               ) -> tuple[list[str], list[np.ndarray], list[str]]:
    """The keys and images of the readable ones of ``items``, and the keys of those skipped (decoded by ``pool``'s
    threads when given: OpenCV releases the GIL while it decodes)."""
    read_one = partial(read_or_warn, limit=limit)
    decoded = pool.map(read_one, [path for _, path in items]) if pool else map(read_one, [p for _, p in items])
    read = list(zip([key for key, _ in items], decoded))
    kept = [(key, image) for key, image in read if image is not None]
    return [key for key, _ in kept], [image for _, image in kept], [key for key, image in read if image is None]


class _Failed:
    def __init__(self, error: BaseException):
        self.error = error


def background(items: Iterable[T], depth: int = 2) -> Iterator[T]:
    """``items``, produced by a background thread up to ``depth`` ahead (decoding overlaps the model); an
    exception in the producer is raised here."""
    queue: Queue = Queue(maxsize=depth)
    end = object()

    def produce() -> None:
        try:
            for item in items:
                queue.put(item)
        except BaseException as err:  # handed to the consumer
            queue.put(_Failed(err))
        finally:
            queue.put(end)

    Thread(target=produce, daemon=True).start()
    while (item := queue.get()) is not end:
        if isinstance(item, _Failed):
            raise item.error
        yield item


def read_chunks(items: list[tuple[str, Path]], batch_size: int, workers: int, limit: int | None = None
                ) -> Iterator[tuple[list[str], list[np.ndarray], list[str]]]:
    """``read_chunk`` of every ``batch_size`` items; with ``workers`` > 0 decoded by that many threads, the next
    chunk while the current one is in the model."""
    if workers <= 0:
        for start in range(0, len(items), batch_size):
            yield read_chunk(items[start:start + batch_size], limit=limit)
        return
    with ThreadPoolExecutor(workers) as pool:
        yield from background(read_chunk(items[start:start + batch_size], pool, limit)
                              for start in range(0, len(items), batch_size))
