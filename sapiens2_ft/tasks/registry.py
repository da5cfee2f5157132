"""The task registry: the one list of tasks. Each task is defined in its folder (``tasks/<task>/spec.py``, a
``TaskSpec``: ``tasks/spec.py``); adding a task is that folder plus its line below. See ``docs/architecture.md``.

The registry sits above the task folders: it imports their specs, and nothing in a task folder imports it.
"""

from __future__ import annotations

import importlib
from typing import Sequence

from torch import nn

from datamodules.body_parts import SAPIENS2_PART_CLASSES
from datamodules.keypoints.metainfo import load_metainfo
from sapiens2_ft.models.factory import LoadReport
from sapiens2_ft.tasks.albedo.spec import ALBEDO
from sapiens2_ft.tasks.matting.spec import MATTING
from sapiens2_ft.tasks.multitask.spec import MULTITASK
from sapiens2_ft.tasks.normal.spec import NORMAL
from sapiens2_ft.tasks.pointmap.spec import POINTMAP
from sapiens2_ft.tasks.pose.spec import POSE
from sapiens2_ft.tasks.seg.spec import SEG
from sapiens2_ft.tasks.spec import TASK_KEY, TaskSpec
from sapiens2_ft.tasks.task_model import build_task_model as build_model_of

DEFAULT_TASK = "pose"  # a config without a ``task`` key
__all__ = ["TASKS", "TASK_KEY", "TaskSpec", "task_spec"]

TASKS: dict[str, TaskSpec] = {spec.name: spec for spec in (POSE, SEG, NORMAL, POINTMAP, MATTING, ALBEDO, MULTITASK)}


def task_spec(task: str) -> TaskSpec:
    """The entry of ``task``; an unknown name is a ValueError listing the tasks."""
    if task not in TASKS:
        raise ValueError(f"unknown task '{task}'; known: {sorted(TASKS)}")
    return TASKS[task]


def import_class(path: str) -> type:
    """The class at a dotted ``module.Class`` path."""
    module, name = path.rsplit(".", 1)
    return getattr(importlib.import_module(module), name)


def inference_class(task: str) -> type | None:
    """The inference class of ``task`` (``tasks.inference.TaskInference``), None for a task not run on its own."""
    spec = task_spec(task)
    return import_class(spec.inference) if spec.inference else None


def takes_person_boxes(task: str) -> bool:
    """Whether ``task``'s model runs on one crop per person box (what its inference class declares)."""
    found = inference_class(task)
    return found is not None and found.takes_person_boxes


def model_class(task: str) -> type:
    """The transformers class of ``task``'s model; a task without one (multitask) is a ValueError."""
    spec = task_spec(task)
    if spec.model.model_class is None:
        raise ValueError(f"task '{task}' has no single transformers model (known: "
                         f"{sorted(t for t, s in TASKS.items() if s.model.model_class)})")
    return spec.model.transformers_class()


def task_of_architecture(architecture: str) -> str | None:
    """The task whose transformers class is named ``architecture`` (a config's ``architectures[0]``) and is its own
    (not ``shares_class``), if any."""
    return next((name for name, spec in TASKS.items()
                 if spec.model.model_class == architecture and not spec.model.shares_class), None)


def task_of_config(config) -> str | None:
    """The task of a model's config (``Sapiens2Config``): the one it records (``TASK_KEY``, written by the export;
    possibly a task this registry lacks), else that of its architecture (a released checkpoint records none). Tasks
    may share a transformers class; the recorded name tells them apart."""
    return getattr(config, TASK_KEY, None) or task_of_architecture((config.architectures or ["Sapiens2Model"])[0])


def label_names(task: str, value) -> list[str]:
    """The labels of ``task`` given its label argument's value (a keypoint set; class names, None = the 29
    Sapiens2 classes); the fixed outputs of the others."""
    spec = task_spec(task).model
    if spec.label_arg == "keypoints":
        return list(load_metainfo(value).keypoint_names)
    if spec.label_arg is not None:
        return list(value or SAPIENS2_PART_CLASSES)
    return list(spec.outputs)


def build_task_model(task: str, labels: Sequence[str], image_size: Sequence[int], init_from: str | None = None,
                     pretraining_head: bool = False, flip_pairs=None, **source) -> tuple[nn.Module, LoadReport]:
    """``task``'s model for ``labels`` by its name (``tasks.task_model.build_task_model`` of its spec)."""
    return build_model_of(task_spec(task), labels, image_size, init_from, pretraining_head, flip_pairs, **source)
