"""What the labelling tools get of a model: per image, its people (a keypoint task) or its class map and per-pixel
confidence (a class task), computed as ``predict`` computes them (the task's inference object: ``estimate`` on the
person boxes, ``image_outputs`` on whole images), and how unsure the model is of them (``select``).

The kind of labels a model gives is its task's declared ``label_kind`` (``tasks/registry.py``): ``keypoint`` or
``class``; a task of fixed outputs (normals, pointmaps, mattes, albedo) has no shape a labelling tool draws.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import numpy as np
import torch

from datamodules.errors import DataError
from sapiens2_ft.tasks.registry import task_spec

if TYPE_CHECKING:  # predict is imported when it runs: its command line imports this package
    from sapiens2_ft.predict.boxes import BoxSource
    from sapiens2_ft.predict.run import Model

LABEL_KINDS = ("keypoint", "class")


class LabellingError(DataError):
    """A model or an argument the labelling tools cannot be given (the message says which and why)."""


def label_kind(task: str) -> str:
    """``keypoint`` or ``class``: what the tools draw of a ``task`` model; LabellingError for the other tasks."""
    kind = task_spec(task).model.label_kind
    if kind not in LABEL_KINDS:
        raise LabellingError(f"a {task} model gives fixed outputs ({', '.join(task_spec(task).model.outputs)}), which no "
                             f"labelling tool draws; pre-annotations are for keypoint (pose) and class (seg) models")
    return kind


@dataclass
class LabelSet:
    """The names a model's labels have in the tools: keypoint names with the skeleton (pairs of indices), or class
    names (index 0 the background); ``model_version`` names the model in every file."""

    kind: str
    names: list[str]
    model_version: str
    skeleton: list[tuple[int, int]] = field(default_factory=list)
    sigmas: list[float] = field(default_factory=list)
    flip_indices: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, inference, model_version: str) -> "LabelSet":
        kind = label_kind(inference.task)
        if kind == "keypoint":
            meta = inference.metainfo
            return cls(kind, list(meta.keypoint_names), model_version, [tuple(p) for p in meta.skeleton],
                       list(meta.sigmas), list(meta.flip_indices))
        return cls(kind, list(inference.labels), model_version)


@dataclass
class ImagePrediction:
    """One image's prediction. ``key``: its path relative to ``--input`` (POSIX); ``size``: (width, height);
    ``people``: per person ``points`` (K, 2) image pixels, ``scores`` (K,), ``score``, ``bbox`` [x, y, w, h]
    (keypoint tasks); ``classes`` (H, W) uint8 class ids and ``confidence`` (H, W) the winning class's probability
    (class tasks)."""

    key: str
    path: Path
    size: tuple[int, int]
    people: list[dict] | None = None
    classes: np.ndarray | None = None
    confidence: np.ndarray | None = None
    unsure: float | None = None
    features: np.ndarray | None = None


def class_maps(inference, outputs) -> tuple[np.ndarray, np.ndarray, torch.Tensor]:
    """(class ids (H, W) uint8, the winner's probability (H, W) float32, the probabilities (C, H, W)) of one image's
    ``image_outputs`` of a class task."""
    probabilities = inference.class_probabilities(outputs)
    confidence, classes = probabilities.max(0)
    return classes.to(torch.uint8).numpy(), confidence.numpy().astype(np.float32), probabilities


def chunk_predictions(models: list[Model], keys: list[str], paths: list[Path], images: list[np.ndarray],
                      source: BoxSource, batch_size: int) -> dict[str, list[ImagePrediction]]:
    """Per task, the ``ImagePrediction`` of each image of a chunk (the people's boxes from ``source``, or from a
    seg model that also runs here)."""
    from sapiens2_ft.predict.run import person_boxes

    whole = [m for m in models if not m.inference.takes_person_boxes]
    outputs = {m.task: m.inference.image_outputs(images) for m in whole}
    boxes = person_boxes(models, outputs, source, keys, images) if len(whole) < len(models) else None
    found: dict[str, list[ImagePrediction]] = {}
    for m in models:
        sizes = [(image.shape[1], image.shape[0]) for image in images]
        if m.inference.takes_person_boxes:
            people = m.inference.estimate(images, boxes, batch_size)
            found[m.task] = [ImagePrediction(k, p, s, people=ps) for k, p, s, ps in zip(keys, paths, sizes, people)]
        else:
            found[m.task] = []
            for key, path, size, out in zip(keys, paths, sizes, outputs[m.task]):
                classes, confidence, _ = class_maps(m.inference, out)
                found[m.task].append(ImagePrediction(key, path, size, classes=classes, confidence=confidence))
    return found


def predict_images(models: list[Model], images: dict[str, Path], source: BoxSource, batch_size: int = 8,
                   workers: int = 2, max_pixels: int | None = None, skipped: list | None = None
                   ) -> Iterator[dict[str, list[ImagePrediction]]]:
    """``chunk_predictions`` of every readable image, ``batch_size`` at a time (decoded by ``workers`` threads);
    the keys of unreadable images (or above ``max_pixels``) are appended to ``skipped``."""
    from sapiens2_ft.predict.inputs import read_chunks

    with torch.no_grad():
        for keys, originals, unreadable in read_chunks(list(images.items()), batch_size, workers, max_pixels):
            if skipped is not None:
                skipped += unreadable
            if keys:
                yield chunk_predictions(models, keys, [images[k] for k in keys], originals, source, batch_size)


# -- how unsure the model is ------------------------------------------------------------------------------------


@contextmanager
def single_pass(inference) -> Iterator[None]:
    """The pose model without its flip test (each crop once), restored after."""
    flip = inference.flip_test
    inference.flip_test = False
    try:
        yield
    finally:
        inference.flip_test = flip


def mirrored_boxes(boxes: np.ndarray, width: int) -> np.ndarray:
    """``[x, y, w, h, score]`` rows in the image mirrored left-right (pixel x -> width - 1 - x, box centres too)."""
    out = np.array(boxes, dtype=np.float64).reshape(-1, 5).copy()
    out[:, 0] = width - 1 - out[:, 0] - out[:, 2]
    return out


def flip_agreement(a: np.ndarray, b: np.ndarray, area: float, sigmas: np.ndarray) -> float:
    """The OKS of two predictions of one person (K, 2): 1 when they agree, towards 0 as they part (COCO's
    per-keypoint tolerance ``2 sigma`` of the person's scale)."""
    d2 = ((np.asarray(a) - np.asarray(b)) ** 2).sum(1)
    return float(np.exp(-d2 / (2 * max(area, 1.0) * (2 * np.asarray(sigmas)) ** 2 + np.spacing(1))).mean())


def pose_unsure(inference, images: list[np.ndarray], boxes: list[np.ndarray], sigmas, batch_size: int
                ) -> list[tuple[float, np.ndarray]]:
    """Per image: how unsure the pose model is, in [0, 1], and a feature of its poses (for spreading a selection).

    Each person crop goes through the model as it is and mirrored (the two halves of the flip test); a person's
    unsureness is ``1 - mean keypoint score x OKS(the two answers)``: high when the model gives low scores, or when
    it answers differently for the mirrored crop. An image's is the mean over its people (0 with none)."""
    flip = np.asarray(inference.metainfo.flip_indices)
    with single_pass(inference):
        straight = inference.estimate(images, boxes, batch_size)
        mirrored = [np.ascontiguousarray(image[:, ::-1]) for image in images]
        other = inference.estimate(mirrored, [mirrored_boxes(b, image.shape[1]) for b, image in zip(boxes, images)],
                                   batch_size)
    out = []
    for image, people, back in zip(images, straight, other):
        width = image.shape[1]
        unsure, layout = [], []
        for p, q in zip(people, back):
            points = q["points"][flip].copy()
            points[:, 0] = width - 1 - points[:, 0]
            scores = (np.asarray(p["scores"]) + np.asarray(q["scores"])[flip]) / 2
            x, y, w, h = (float(v) for v in p["bbox"][:4])
            agreement = flip_agreement(p["points"], points, w * h, sigmas)
            unsure.append(1.0 - float(scores.mean()) * agreement)
            layout.append(((p["points"] + points) / 2 - [x + w / 2, y + h / 2]) / max(w, h, 1.0))
        feature = np.mean(layout, 0).reshape(-1) if layout else np.zeros(2 * len(flip))
        out.append((float(np.mean(unsure)) if unsure else 0.0, feature))
    return out


def class_unsure(probabilities: torch.Tensor) -> tuple[float, np.ndarray]:
    """How unsure a class model is of one image, in [0, 1]: ``1 - margin`` (the winning class's probability minus the
    runner-up's) averaged over the people, each pixel weighted by its probability of not being background (class
    0); and the fractions of the people's pixels per class (for spreading a selection)."""
    top = probabilities.float().topk(2, dim=0).values
    weight = (1 - probabilities[0].float()).clamp_min(0)
    total = float(weight.sum())
    unsure = float(((1 - (top[0] - top[1])) * weight).sum() / total) if total > 1e-6 else 0.0
    areas = (probabilities.float() * weight).flatten(1).sum(1).numpy()
    return unsure, areas / max(float(areas.sum()), 1e-6)
