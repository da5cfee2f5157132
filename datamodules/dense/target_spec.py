"""What the data layer knows of a whole-image task, as one small spec handed to it by the task
(``sapiens2_ft/tasks/<task>/targets.py``): its files, how they load and are checked, how each of its maps follows the
image, the tensors of the dataset item, its augmentation defaults, the checks that leave a training sample out, and so
the resize it is trained, validated and predicted with. The data layer names no task; it calls these hooks."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Callable, Mapping

import numpy as np

from datamodules.dense.filters import DenseFilter
from datamodules.dense.maps import MapRule
from datamodules.dense.pipelines import PIPELINE_FIT

# ``attempt(kind, read)``: run one file's reader. Training raises its DataError; the data check records the
# problem under ``kind`` and gets None, so that every file of a sample is checked.
Attempt = Callable[[str, Callable[[], np.ndarray]], "np.ndarray | None"]


def raise_problems(kind: str, read: Callable[[], np.ndarray]) -> np.ndarray:
    """The ``attempt`` of training: a file's problem raises its DataError."""
    return read()


@dataclass(frozen=True)
class TargetSpec:
    """One whole-image task's targets; the data layer's code calls these hooks instead of asking which task it has.

    Args:
        task: The task's name (its ``TaskSpec``'s), for messages, logs and the shards' index.
        paths: ``(split_dir, name) -> (required, optional)``: the target files of image ``name`` by kind.
        load: ``(files, shape, num_classes, attempt) -> dict``: the numpy targets of one image (its ``maps``, the valid
            ``mask``, the intrinsics ``K``), every file read through ``attempt``.
        to_item: ``(sample, canonical_focal) -> dict``: the dataset item's target tensors of a transformed sample.
        pipeline: Training augmentation pipeline (``seg``, ``camera`` or ``generic``; see ``dense.augment``); its
            last step is the resize of validation and predict too (``resize``).
        maps: How each of its map kinds follows the image (``dense.maps.MapRule``): warp, flip, validity, colour.
        augment: This task's defaults where they differ from the pipeline's (``DenseAugment`` fields).
        fixed: ``DenseAugment`` fields that must stay 0 for this task, with the reason.
        checks: ``DenseFilter`` field -> ``(item, threshold) -> why | None``: the task's own checks that leave a
            training sample out after augmentation (the valid-pixel checks of the ``mask`` are the filter's own).
    """

    task: str
    paths: Callable[[Path, str], tuple[dict[str, Path], dict[str, Path]]]
    load: Callable[..., dict]
    to_item: Callable[[dict, float], dict]
    pipeline: str
    maps: Mapping[str, MapRule] = field(default_factory=dict)
    augment: Mapping[str, object] = field(default_factory=dict)
    fixed: Mapping[str, str] = field(default_factory=dict)
    checks: Mapping[str, Callable[[dict, float], "str | None"]] = field(default_factory=dict)

    def __post_init__(self):
        filters = {f.name for f in fields(DenseFilter)}
        bad = [f"checks: {name!r} is no data.filter field ({', '.join(sorted(filters))})"
               for name in self.checks if name not in filters]
        bad += [f"maps: {kind!r} is a {type(rule).__name__}, not a MapRule" for kind, rule in self.maps.items()
                if not isinstance(rule, MapRule)]
        if self.pipeline not in PIPELINE_FIT:
            bad.append(f"pipeline: {self.pipeline!r} is not one of {', '.join(PIPELINE_FIT)}")
        if bad:
            raise ValueError(f"target spec of {self.task!r}: " + "; ".join(bad))

    @property
    def resize(self) -> str:
        """How a whole image is resized to the input: ``letterbox`` or ``stretch``, its pipeline's last step (and so
        the validation resize, predict's, and the exported processor's)."""
        return PIPELINE_FIT[self.pipeline]
