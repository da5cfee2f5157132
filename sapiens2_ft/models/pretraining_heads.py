"""Task heads trained together with a backbone in multi-task pretraining, saved beside it.

``HEADS_FILE`` in a backbone's directory holds the heads under ``<task>.<name>``, where ``<name>`` is the task
model's own key without the backbone's ``model.`` (``pose.decode_head.predictor.weight``). Continued pretraining
starts from them (``tasks.multitask``), and so can a fine-tuning run's head (``model.pretraining_head``): the
stand-in, for a backbone pretrained here, of starting from a released task model such as
``facebook/sapiens2-pose-0.4b``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Mapping, Sequence

import torch
from safetensors import safe_open
from torch import nn

from sapiens2_ft.models.factory import merged_row

HEADS_FILE = "pretraining_heads.safetensors"
KEY = "model.pretraining_head"
NEW_HEAD = f"set {KEY}: false for a new head"


def heads_path(directory: str | Path) -> Path:
    return Path(directory) / HEADS_FILE


def labels_key(task: str) -> str:
    """The file's metadata key of a task's output row names (a JSON list; label-set tasks only)."""
    return f"{task}.labels"


def load_task_head(model: nn.Module, directory: str | Path, task: str, labels: Sequence[str] | None = None,
                   sources: Mapping[str, Sequence[str]] | None = None) -> tuple[str, list[str]]:
    """Load ``task``'s pretraining head from ``directory`` into ``model`` (a transformers task model whose head
    has the saved tensors' shapes); the outcome in words and the labels whose rows start new. When the file names the head's output rows
    (``labels_key``) and ``labels`` differ from them, the predictor's rows are taken by name, a label of ``sources``
    the head lacks starts from its sources' rows (``factory.merged_row``) and the others stay new. Errors name what
    differs and the way out."""
    path = heads_path(directory)
    if not path.is_file():
        raise FileNotFoundError(f"{KEY}: {directory} has no {HEADS_FILE} (tools/pretrain_demo_backbone.py saves "
                                f"one beside the backbones it pretrains); {NEW_HEAD}")
    with safe_open(str(path), framework="pt") as f:
        keys = list(f.keys())
        saved = {k.split(".", 1)[1]: f.get_tensor(k) for k in keys if k.startswith(f"{task}.")}
        named = (f.metadata() or {}).get(labels_key(task))
    if not saved:
        tasks = sorted({k.split(".", 1)[0] for k in keys})
        raise ValueError(f"{KEY}: {path} holds heads of {', '.join(tasks)}, none of '{task}'; {NEW_HEAD}")
    own = {k: v for k, v in model.state_dict().items() if not k.startswith("model.")}
    rows = row_map(json.loads(named) if named else None, labels, saved, own)
    differ = sorted(k for k in own.keys() | saved.keys() if k not in rows and (
        k not in own or k not in saved or own[k].shape != saved[k].shape))
    if differ:
        shapes = "; ".join(f"{k}: saved {list(saved[k].shape) if k in saved else '-'}, "
                           f"model {list(own[k].shape) if k in own else '-'}" for k in differ[:3])
        raise ValueError(f"{KEY}: the '{task}' head in {path} does not fit this model ({len(differ)} of "
                         f"{len(own.keys() | saved.keys())} tensors differ: {shapes}{' ...' if len(differ) > 3 else ''}"
                         f"). It was pretrained with the size's default head (no model.head), its label set and "
                         f"input size; {NEW_HEAD}")
    with torch.no_grad():
        for key, tensor in saved.items():
            if key in rows:
                for target, source in rows[key]:
                    own[key][target].copy_(tensor[source].to(own[key].dtype))
            else:
                own[key].copy_(tensor.to(own[key].dtype))  # saved in bf16
    said, new = f"head: the '{task}' head of pretraining ({HEADS_FILE}, {len(saved)} tensors)", []
    if rows:
        pairs, names = next(iter(rows.values())), json.loads(named)
        new = [name for k, name in enumerate(labels) if k not in {t for t, _ in pairs}]
        merged = merge_rows(own, saved, names, labels, sources or {})
        new = [name for name in new if name not in merged]
        said += (f"; output rows by name: {len(pairs)} of its {len(names)}"
                 + (f", merged from theirs: {', '.join(merged)}" if merged else "") + f", new: {', '.join(new) or '-'}")
    return said, new


def merge_rows(own: dict, saved: dict, saved_labels: list[str], labels: Sequence[str],
               sources: Mapping[str, Sequence[str]]) -> list[str]:
    """Start each label of ``sources`` that the saved head lacks, and whose sources it has, from their rows
    (``factory.merged_row``); the labels so started."""
    weight, bias = "decode_head.predictor.weight", "decode_head.predictor.bias"
    merged = []
    with torch.no_grad():
        for k, name in enumerate(labels):
            rows = sources.get(name)
            if name in saved_labels or not rows or any(r not in saved_labels for r in rows):
                continue
            w, b = merged_row(saved[weight].float(), saved[bias].float(), [saved_labels.index(r) for r in rows])
            own[weight][k].copy_(w.to(own[weight].dtype))
            own[bias][k].copy_(b.to(own[bias].dtype))
            merged.append(name)
    return merged


def row_map(saved_labels: list[str] | None, labels: Sequence[str] | None, saved: dict, own: dict
            ) -> dict[str, list[tuple[int, int]]]:
    """For the predictor's tensors (``decode_head.predictor.*``) of a head saved for other output rows: key ->
    (model row, saved row) of each label they share; {} when the rows are the same (or unnamed)."""
    if not saved_labels or labels is None or list(labels) == list(saved_labels):
        return {}
    pairs = [(k, saved_labels.index(name)) for k, name in enumerate(labels) if name in saved_labels]
    keys = [k for k in saved if k.startswith("decode_head.predictor.")]
    if not pairs or any(k not in own or own[k].shape[1:] != saved[k].shape[1:] for k in keys):
        return {}
    return {k: pairs for k in keys}
