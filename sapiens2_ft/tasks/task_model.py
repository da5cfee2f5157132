"""A task's model: ``models.factory.build_model`` given what the task's spec says of it (its transformers class,
released head layouts, label names), then the task's own adjustment of the built model."""

from __future__ import annotations

from typing import Sequence

from torch import nn

from sapiens2_ft.models.factory import LoadReport, ModelSource, ModelTarget, build_model, resolve_pretrained
from sapiens2_ft.models.init_from import build_from_run
from sapiens2_ft.models.pretraining_heads import load_task_head
from sapiens2_ft.tasks.spec import TaskSpec


def build_task_model(spec: TaskSpec, labels: Sequence[str], image_size: Sequence[int], init_from: str | None = None,
                     pretraining_head: bool = False, flip_pairs=None, label_sources=None, **source) -> tuple[nn.Module, LoadReport]:
    """The model of task ``spec`` for ``labels``: ``models.factory.build_model`` with its transformers class, released
    head layouts and label names, or with ``init_from`` the model of an earlier run (``models.init_from``); then the
    task's ``fit_model``. ``pretraining_head``: the head starts from the task's head saved beside the ``pretrained``
    backbone by multi-task pretraining (``models.pretraining_heads``; not with ``init_from``, whose run has its head).

    ``source``: the fields of ``models.factory.ModelSource`` (``pretrained``, ``size``, ``head``,
    ``pos_embed_rescale``, ``attn_implementation``); ``flip_pairs``: pose's mirror pairs of ``labels``;
    ``label_sources``: the labels merged from a checkpoint's labels (seg's class set: ``ModelTarget``).
    """
    model_spec, task = spec.model, spec.name
    labels = list(labels)
    if model_spec.model_class is None:
        raise ValueError(f"task '{task}' has no single transformers model")
    if model_spec.outputs and labels != list(model_spec.outputs):
        raise ValueError(f"task '{task}' predicts {list(model_spec.outputs)}, got labels {labels}")
    source = ModelSource(**source)
    released = model_spec.released_labels() if model_spec.released_labels and not init_from else ()
    target = ModelTarget(model_spec.transformers_class(), labels, image_size, model_spec.heads, flip_pairs,
                         released_labels=released, rows_by_name=not model_spec.outputs, holds_head=spec.holds,
                         label_sources=dict(label_sources or {}),
                         task=task, label_kind=model_spec.label_kind)
    model, report = build_from_run(init_from, target, source) if init_from else build_model(target, source)
    if model_spec.fit_model is not None:
        model_spec.fit_model(model, report)
    if pretraining_head and not init_from:
        note, new = load_task_head(model, resolve_pretrained(source.pretrained), task,
                                   labels if model_spec.label_arg else None, label_sources)
        report.notes.append(note)
        report.head, report.new = "pretrained", new
    return model, report
