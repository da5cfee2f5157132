"""The web demo's work, without the page: the models are loaded once (``predict``'s loading), then each photo gets
the pictures ``predict`` draws (one per task, and the multi-task sheet when there are several models) with what the
models found as JSON, and each video ``predict``'s video with its per-frame records. Bad input is a ``DemoError``,
whose message the page shows."""

from __future__ import annotations

import itertools
import json
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
from sapiens2_ft.predict.run import Model, infer_chunk
from sapiens2_ft.predict.sheet import sheet
from sapiens2_ft.predict.video import Frames, predict_video


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

    def photo(self, path: str | Path) -> tuple[list[tuple[np.ndarray, str]], dict]:
        """(title, RGB picture) per task and the sheet, and the JSON of what each task found, for one image file."""
        path = Path(path)
        check_photo(path, self.limits)
        try:
            image = read_image(str(path), self.limits.max_pixels)
        except DataError as err:
            raise DemoError(f"{path.name}: not an image this demo can read ({err})") from None
        return self.run(image)

    def run(self, image: np.ndarray) -> tuple[list[tuple[np.ndarray, str]], dict]:
        """The pictures and findings of one RGB uint8 image (each model's ``Result``)."""
        with self.lock, torch.autocast(self.device_type, torch.bfloat16, enabled=self.bf16):
            [results] = infer_chunk(self.models, ["image"], [image], self.source, self.batch_size)
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
