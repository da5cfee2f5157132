"""Task heads trained together with a backbone in multi-task pretraining, saved beside it.

``HEADS_FILE`` in a backbone's directory holds the heads under ``<task>.<name>``, where ``<name>`` is the task
model's own key without the backbone's ``model.`` (``pose.decode_head.predictor.weight``). Continued pretraining
starts from them (``tasks.multitask``), and so can a fine-tuning run's head (``model.pretraining_head``): the
stand-in, for a backbone pretrained here, of starting from a released task model such as
``facebook/sapiens2-pose-0.4b``.
"""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn

HEADS_FILE = "pretraining_heads.safetensors"
KEY = "model.pretraining_head"
NEW_HEAD = f"set {KEY}: false for a new head"


def heads_path(directory: str | Path) -> Path:
    return Path(directory) / HEADS_FILE


def load_task_head(model: nn.Module, directory: str | Path, task: str) -> str:
    """Load ``task``'s pretraining head from ``directory`` into ``model`` (a transformers task model whose head
    has exactly the saved tensors); the outcome in words. Errors name what differs and the way out."""
    path = heads_path(directory)
    if not path.is_file():
        raise FileNotFoundError(f"{KEY}: {directory} has no {HEADS_FILE} (tools/pretrain_demo_backbone.py saves "
                                f"one beside the backbones it pretrains); {NEW_HEAD}")
    with safe_open(str(path), framework="pt") as f:
        keys = list(f.keys())
        saved = {k.split(".", 1)[1]: f.get_tensor(k) for k in keys if k.startswith(f"{task}.")}
    if not saved:
        tasks = sorted({k.split(".", 1)[0] for k in keys})
        raise ValueError(f"{KEY}: {path} holds heads of {', '.join(tasks)}, none of '{task}'; {NEW_HEAD}")
    own = {k: v for k, v in model.state_dict().items() if not k.startswith("model.")}
    differ = sorted(k for k in own.keys() | saved.keys()
                    if k not in own or k not in saved or own[k].shape != saved[k].shape)
    if differ:
        shapes = "; ".join(f"{k}: saved {list(saved[k].shape) if k in saved else '-'}, "
                           f"model {list(own[k].shape) if k in own else '-'}" for k in differ[:3])
        raise ValueError(f"{KEY}: the '{task}' head in {path} does not fit this model ({len(differ)} of "
                         f"{len(own.keys() | saved.keys())} tensors differ: {shapes}{' ...' if len(differ) > 3 else ''}"
                         f"). It was pretrained with the size's default head (no model.head), its label set and "
                         f"input size; {NEW_HEAD}")
    with torch.no_grad():
        for key, tensor in saved.items():
            own[key].copy_(tensor.to(own[key].dtype))  # saved in bf16
    return f"head: the '{task}' head of pretraining ({HEADS_FILE}, {len(saved)} tensors)"
