"""What a dense task reads per image, as one small spec: its files, how they load and are checked, the tensors
of the dataset item, and its augmentation defaults. ``dense/targets/<task>.py`` holds one per task."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

# ``attempt(kind, read)``: run one file's reader. Training raises its DataError; the data check records the
# problem under ``kind`` and gets None, so that every file of a sample is checked.
Attempt = Callable[[str, Callable[[], np.ndarray]], "np.ndarray | None"]


def raise_problems(kind: str, read: Callable[[], np.ndarray]) -> np.ndarray:
    """The ``attempt`` of training: a file's problem raises its DataError."""
    return read()


@dataclass(frozen=True)
class TargetSpec:
    """One dense task's targets; the data layer's code calls these hooks instead of asking which task it has.

    Args:
        task: Task name (the key of ``dense.targets.TARGETS``, as of the task registry).
        paths: ``(split_dir, name) -> (required, optional)``: the target files of image ``name`` by kind.
        load: ``(files, shape, num_classes, attempt) -> dict``: the numpy targets of one image (the kinds of
            ``dense.geometry``: ``labels``, ``normals``, ``mask``, ``depth``, ``pointmap``, ``K``, ``alpha``,
            ``foreground``), every file read through ``attempt``.
        to_item: ``(sample, canonical_focal) -> dict``: the dataset item's target tensors of a transformed sample.
        pipeline: Training augmentation pipeline (``seg``, ``camera`` or ``generic``; see ``dense.augment``).
        augment: This task's defaults where they differ from the pipeline's (``DenseAugment`` fields).
        fixed: ``DenseAugment`` fields that must stay 0 for this task, with the reason.
        maps: Map kinds of its own, beyond those of ``dense.geometry``, each with its warp: ``linear`` (values that
            blend, as an image's) or ``nearest`` (values kept, as ids or depths); a flip mirrors them.
    """

    task: str
    paths: Callable[[Path, str], tuple[dict[str, Path], dict[str, Path]]]
    load: Callable[..., dict]
    to_item: Callable[[dict, float], dict]
    pipeline: str
    augment: Mapping[str, object] = field(default_factory=dict)
    fixed: Mapping[str, str] = field(default_factory=dict)
    maps: Mapping[str, str] = field(default_factory=dict)
