"""``model.init_from``: a new run that starts from the weights of an earlier fine-tuning run (weights only).

Unlike ``model.pretrained`` (a starting point that is adapted: new head, rows transferred by name),
``init_from`` takes the whole model as trained and refuses another task or another label set.
Sources: a ``.ckpt`` file, an FSDP2 distributed checkpoint directory, or an exported directory.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from torch import nn
from transformers import Sapiens2Config

from sapiens2_ft.checkpoints import CheckpointError, check_compatible, is_distributed_checkpoint, load_model
from sapiens2_ft.models.factory import (
    TASK_CLASSES,
    LoadReport,
    _configure,
    _fit_scale_head,
    check_scale_branch,
    from_pretrained_checked,
)


def _load_exported(path: Path, attn_implementation: str) -> tuple[nn.Module, str, list[str]]:
    config = Sapiens2Config.from_pretrained(path)
    architecture = (config.architectures or ["Sapiens2Model"])[0]
    task = next((t for t, cls in TASK_CLASSES.items() if cls.__name__ == architecture), None)
    if task is None:
        raise CheckpointError(f"model.init_from: {path} holds a {architecture}, not a Sapiens2 task model; "
                              f"a pretrain-only backbone goes in --model.pretrained")
    model = from_pretrained_checked(TASK_CLASSES[task], path, attn_implementation=attn_implementation)
    return model, task, [config.id2label[i] for i in range(config.num_labels)]


def build_from_run(init_from: str, task: str, labels: Sequence[str], image_size: Sequence[int],
                   pos_embed_rescale: float | None = None, flip_pairs=None,
                   attn_implementation: str = "sdpa") -> tuple[nn.Module, LoadReport]:
    """The model of an earlier run, checked against ``task`` and ``labels``, set up for ``image_size``."""
    path = Path(init_from)
    if path.is_file() or is_distributed_checkpoint(path):
        model, info = load_model(path)
        source_task, source_labels, what = info.task, info.labels, f"checkpoint at step {info.global_step}"
    elif (path / "config.json").is_file():
        model, source_task, source_labels = _load_exported(path, attn_implementation)
        what = "exported model"
    else:
        raise CheckpointError(f"model.init_from: {path} is neither a checkpoint (.ckpt file or distributed "
                              f"checkpoint directory) nor a model directory with a config.json")
    check_compatible(path, source_task, source_labels, task, list(labels), "--init_from")
    report = LoadReport(str(path), backbone="pretrained", head="pretrained",
                        notes=[f"init_from: all weights of the {what}; optimiser and step start fresh"])
    _configure(model.config, task, labels, image_size, pos_embed_rescale, flip_pairs, None)
    _fit_scale_head(model, report)
    check_scale_branch(model.config)
    return model.train(), report
