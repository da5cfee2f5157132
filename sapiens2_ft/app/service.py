"""The web demo's work, without the page: the models are loaded once (``predict``'s loading), then each photo gets
the pictures ``predict`` draws (one per task, and the multi-task sheet when there are several models) with what the
models found as JSON (and the files a task offers for download: pointmap's ``.ply`` point cloud), and each video
``predict``'s video with its per-frame records. Bad input is a ``DemoError``, whose message the page shows."""

from __future__ import annotations

import itertools
import json
import re
import threading
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import torch

from datamodules.errors import BadInput, DataError, RefusedInput, Sapiens2FTError
from datamodules.boundary.files import read_json
from datamodules.boundary.images import check_pixels, file_size, read_image
from datamodules.boundary.video import open_video
from datamodules.boundary.writes import replacing
from sapiens2_ft.predict.boxes import BoxSource, whole_image
from sapiens2_ft.predict.options import uses_bf16
from sapiens2_ft.predict.result import Result
from sapiens2_ft.predict.run import Model, infer_chunk
from sapiens2_ft.predict.sheet import sheet
from sapiens2_ft.predict.video import Frames, predict_video
from sapiens2_ft.tasks.inference import write_arrays


class DemoError(BadInput):
    """A visitor's input the demo refuses; the message says why (shown in the page)."""


@dataclass(frozen=True)
class Limits:
    """What one request may ask of the demo."""

    max_megapixels: float = 40.0  # a photo's width x height, read from its header before it is decoded
    max_frames: int = 300  # a video's frames run through the models; the rest is left out (said in its JSON)

    @property
    def max_pixels(self) -> int:
        """``max_megapixels`` as the boundary's pixel limit."""
        return int(self.max_megapixels * 1e6)


class FirstFrames:
    """The first ``count`` frames of ``frames`` (``predict.video.Frames``), with its name and frame rate."""

    def __init__(self, frames: Frames, count: int):
        self.path, self.folder, self.fps = frames.path, frames.folder, frames.fps
        self.total = frames.count
        self.count = min(count, frames.count) if frames.count else count
        self.frames = frames

    def __iter__(self):
        return itertools.islice(iter(self.frames), self.count)


def image_size(path: Path) -> tuple[int, int]:
    """(width, height) from the file's header (the boundary's reader: nothing decoded); DemoError when it is not
    an image of a kind the demo reads."""
    size = file_size(path)
    if size is None:
        raise DemoError(f"{path.name}: not an image this demo can read (PNG, JPEG, BMP, WebP or TIFF)")
    return size


def check_photo(path: Path, limits: "Limits") -> None:
    """Refuse a photo above ``limits.max_megapixels`` from its header alone, before anything decodes it (the
    boundary's pixel rule, worded for the page)."""
    width, height = image_size(path)
    try:
        check_pixels((width, height), path.name, limits.max_pixels)
    except RefusedInput:
        raise DemoError(f"{path.name}: {width} x {height} pixels ({width * height / 1e6:.0f} megapixels) is more "
                        f"than this demo takes ({limits.max_megapixels:g}); send a smaller picture") from None


def webm(video: Path) -> Path:
    """``video`` re-encoded as VP8 WebM, which browsers play (OpenCV's mp4v is not); the input when it cannot be."""
    reader = open_video(video)
    fps = reader.get(cv2.CAP_PROP_FPS) or 30.0
    out, writer = video.with_suffix(".webm"), None
    try:
        with replacing(out.parent, out.name) as temporary:
            try:
                while (frame := reader.read()[1]) is not None:
                    if writer is None:
                        writer = cv2.VideoWriter(str(temporary), cv2.VideoWriter_fourcc(*"VP80"), fps,
                                                 frame.shape[1::-1])
                        if not writer.isOpened():
                            raise _NotWritten
                    writer.write(frame)
            finally:
                reader.release()
                if writer is not None:
                    writer.release()
            if writer is None:
                raise _NotWritten
    except _NotWritten:
        return video
    return out


class _NotWritten(Exception):
    """No WebM could be written (no encoder, or no frame): the input is shown as it is."""


class Demo:
    """Loaded models (``predict.run.Model``, one per task) and where pose's person boxes come from. One request runs
    at a time (the page's queue, and a lock for callers beside it)."""

    def __init__(self, models: list[Model], source: BoxSource = whole_image, batch_size: int = 8,
                 limits: Limits = Limits(), boxes: str = "the whole image"):
        self.models, self.source, self.batch_size, self.limits = models, source, batch_size, limits
        self.boxes = boxes  # in words, for the page
        self.lock = threading.Lock()
        self.device_type = models[0].inference.device.type
        self.bf16 = uses_bf16("auto", self.device_type)  # as predict's --precision auto

    @property
    def downloads(self) -> list[str]:
        """The file suffixes a photo's answer offers for download (what the models' tasks declare: pointmap's
        ``.ply``); empty for none."""
        return [suffix for m in self.models for suffix in m.inference.downloads]

    def photo(self, path: str | Path) -> tuple[list[tuple[np.ndarray, str]], dict]:
        """(title, RGB picture) per task and the sheet, and the JSON of what each task found, for one image file."""
        image = self.read_photo(Path(path))
        return self.answer(image, self.results(image))

    def photo_and_files(self, path: str | Path, folder: Path) -> tuple[list[tuple[np.ndarray, str]], dict, list[Path]]:
        """``photo``'s answer and the files of ``downloads``, written into ``folder`` as ``NAME<suffix>`` (NAME: the
        photo's name, letters, digits, ``-`` and ``_`` kept)."""
        path = Path(path)
        image = self.read_photo(path)
        results = self.results(image)
        name = re.sub(r"[^A-Za-z0-9_-]", "_", path.stem)[:64] or "photo"
        written = []
        for result in results.values():
            files = {suffix: result.files[suffix] for suffix in result.inference.downloads}
            write_arrays(folder, name, files)
            written += [folder / f"{name}{suffix}" for suffix in files]
        return *self.answer(image, results), written

    def read_photo(self, path: Path) -> np.ndarray:
        """The RGB uint8 image of a photo file, refused above ``limits`` from its header."""
        check_photo(path, self.limits)
        try:
            return read_image(str(path), self.limits.max_pixels)
        except DataError as err:
            raise DemoError(f"{path.name}: not an image this demo can read ({err})") from None

    def results(self, image: np.ndarray) -> dict[str, Result]:
        """Each model's ``Result`` of one RGB uint8 image, by task."""
        with self.lock, torch.autocast(self.device_type, torch.bfloat16, enabled=self.bf16):
            [results] = infer_chunk(self.models, ["image"], [image], self.source, self.batch_size)
        return results

    def run(self, image: np.ndarray) -> tuple[list[tuple[np.ndarray, str]], dict]:
        """The pictures and findings of one RGB uint8 image (each model's ``Result``)."""
        return self.answer(image, self.results(image))

    def answer(self, image: np.ndarray, results: dict[str, Result]) -> tuple[list[tuple[np.ndarray, str]], dict]:
        """The pictures (one per task, and the sheet of several) and the JSON of what each task found."""
        pictures = [result.picture()[::-1] for result in results.values()]
        if len(self.models) > 1:
            pictures.append((sheet(image, results), "sheet"))
        findings = {"image": {"width": image.shape[1], "height": image.shape[0]}, "person_boxes": self.boxes}
        findings.update({task: result.findings() for task, result in results.items()})
        return pictures, json.loads(json.dumps(findings))  # plain JSON types only

    def video(self, path: str | Path, out: Path) -> tuple[Path, dict]:
        """``predict``'s video of the first ``limits.max_frames`` frames (WebM where it can) and its records."""
        try:
            frames = Frames(Path(path))
        except Sapiens2FTError as err:
            raise DemoError(str(err).replace("--input ", "")) from None
        first = FirstFrames(frames, self.limits.max_frames)
        out.mkdir(parents=True, exist_ok=True)
        with self.lock, torch.autocast(self.device_type, torch.bfloat16, enabled=self.bf16):
            try:
                clip, records = predict_video(self.models, first, out, self.batch_size, self.source)
            except Sapiens2FTError as err:
                raise DemoError(str(err).replace("--input ", "")) from None
        found = read_json(records)
        if len(found["frames"]) == first.count and (first.total is None or first.total > first.count):
            found["note"] = f"the first {first.count} frames only (this demo's limit)"
        return webm(clip), found
