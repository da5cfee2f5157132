"""One result per image, whatever the task: what ``Predictor.predict`` / ``stream`` answer, what ``predict`` writes
and the web demo shows (in the spirit of Ultralytics' ``Results``).

A :class:`Result` holds the image (its name and size), the people a model that takes person boxes found (``people``:
boxes, keypoints, scores, track ids; empty for a whole-image task), the maps of a whole-image model at the image's
size (``maps``, when asked for; empty for pose) and the files ``predict`` writes of them (``files``), and answers
``to_json()``, ``plot()`` and ``save(directory)`` through the task's inference object.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np

from sapiens2_ft.tasks.inference import Files, TaskInference


class People:
    """The people found in one image: a sequence of dicts (``points`` (K, 2) image pixels, ``scores`` (K,) in
    [0, 1], ``score`` the instance score, ``bbox`` ``[x, y, w, h]`` of the box cropped, ``track_id`` in a stream)
    and the same as arrays of N people: ``boxes`` (N, 4), ``scores`` (N,), ``keypoints`` (N, K, 2),
    ``keypoint_scores`` (N, K), ``track_ids`` (N,) (-1: not tracked). Empty for a whole-image task."""

    def __init__(self, people: list[dict] | None = None, num_keypoints: int = 0):
        self._people = list(people or [])
        self.num_keypoints = num_keypoints

    def __len__(self) -> int:
        return len(self._people)

    def __iter__(self) -> Iterator[dict]:
        return iter(self._people)

    def __getitem__(self, index: int) -> dict:
        return self._people[index]

    def __repr__(self) -> str:
        return f"People({len(self)} people, {self.num_keypoints} keypoints)"

    @property
    def boxes(self) -> np.ndarray:
        return np.array([p["bbox"][:4] for p in self._people], dtype=np.float64).reshape(-1, 4)

    @property
    def scores(self) -> np.ndarray:
        return np.array([p["score"] for p in self._people], dtype=np.float64)

    @property
    def keypoints(self) -> np.ndarray:
        return np.array([p["points"] for p in self._people], dtype=np.float64).reshape(-1, self.num_keypoints, 2)

    @property
    def keypoint_scores(self) -> np.ndarray:
        return np.array([p["scores"] for p in self._people], dtype=np.float64).reshape(-1, self.num_keypoints)

    @property
    def track_ids(self) -> np.ndarray:
        return np.array([p.get("track_id", -1) for p in self._people], dtype=np.int64)


@dataclass
class Result:
    """One image's prediction by one model.

    ``name``: the image's path (relative to the folder given), the path given, or None for an array; ``image``:
    the RGB uint8 (H, W, 3) predicted on; ``inference``: the model's inference object; ``output``: the task's own
    form of the prediction, which its inference object draws, counts and writes (pose: the people's dicts; a
    whole-image task: its ``files``); ``people``, ``maps`` ({output: (C, H, W) float32 at the image's size, or a
    number}), ``files`` ({suffix: array} as ``predict`` writes ``NAME<suffix>``, pictures in BGR order); ``mask``:
    where another model found the people (H, W) bool, which the pictures of normals and depth keep to; ``frame``
    and ``time`` (seconds) in a stream.
    """

    name: str | None
    image: np.ndarray
    inference: TaskInference
    output: list | Files
    people: People = field(default_factory=People)
    maps: dict[str, np.ndarray] = field(default_factory=dict)
    files: Files = field(default_factory=dict)
    mask: np.ndarray | None = None
    frame: int | None = None
    time: float | None = None

    @property
    def task(self) -> str:
        return self.inference.task

    @property
    def size(self) -> tuple[int, int]:
        """(height, width) of the image, as its array's shape."""
        return int(self.image.shape[0]), int(self.image.shape[1])

    def picture(self) -> tuple[str, np.ndarray]:
        """(title, RGB picture) of the prediction, as ``predict`` draws it."""
        return self.inference.picture(self.output, self.image, self.mask)

    def plot(self) -> np.ndarray:
        """The picture of the prediction over the image: RGB uint8 (H, W, 3)."""
        return self.picture()[1]

    def findings(self) -> dict:
        """What the model found, as plain JSON data (pose: each person's box, score and keypoints by name, with its
        track id in a stream; seg: the classes' areas; ...), as the web demo answers it."""
        found = self.inference.findings(self.output)
        for record, person in zip(found.get("people", []), self.people):
            if "track_id" in person:
                record["track_id"] = int(person["track_id"])
        return found

    def to_dict(self) -> dict:
        """The image (name, width, height; frame and time in a stream), the task and ``findings``."""
        height, width = self.size
        head = {"name": self.name, "width": width, "height": height, "task": self.task}
        if self.frame is not None:
            head.update(frame=self.frame, time=self.time)
        return {**head, **self.findings()}

    def to_json(self, **kwargs) -> str:
        """``to_dict`` as JSON text (``kwargs``: ``json.dumps``'s, e.g. ``indent=2``)."""
        return json.dumps(self.to_dict(), **kwargs)

    def save(self, directory: str | Path, key: str | None = None) -> Path:
        """The files ``predict`` writes of this image alone, into ``directory``: a whole-image task's
        ``NAME<suffix>`` files, pose's ``overlays/NAME.jpg``, ``keypoints.json`` and ``images.json``. ``key``: the
        image's name there (default ``name``; an array's ``image.png``, a frame's ``frameNNNNNN.png``)."""
        directory = Path(directory)
        key = key or self.name or (f"frame{self.frame:06d}.png" if self.frame is not None else "image.png")
        writer = self.inference.writer(directory)
        writer.add(key, 1, self.image, self.output)
        writer.close()
        return directory

    def __repr__(self) -> str:
        height, width = self.size
        return (f"Result(name={self.name!r}, task={self.task!r}, size={width}x{height}, people={len(self.people)}, "
                f"maps={list(self.maps)}, files={list(self.files)})")
