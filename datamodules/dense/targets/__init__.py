"""The dense tasks' target specs by task name: the one list of dense tasks in the data layer."""

from __future__ import annotations

from typing import Literal

from datamodules.dense.targets.albedo import ALBEDO
from datamodules.dense.targets.matting import MATTING
from datamodules.dense.targets.normal import NORMAL
from datamodules.dense.targets.pointmap import POINTMAP
from datamodules.dense.targets.seg import SEG
from datamodules.dense.targets.spec import TargetSpec

TARGETS: dict[str, TargetSpec] = {spec.task: spec for spec in (SEG, NORMAL, POINTMAP, MATTING, ALBEDO)}
DENSE_TASKS = tuple(TARGETS)
DenseTask = Literal[DENSE_TASKS]  # the ``data.task`` choices


def target_spec(task: str) -> TargetSpec:
    """The target spec of a dense ``task``; another name is a ValueError listing the dense tasks."""
    if task not in TARGETS:
        raise ValueError(f"unknown dense task {task!r}; expected one of {DENSE_TASKS}")
    return TARGETS[task]
