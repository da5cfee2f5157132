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

from sapiens2_ft.models.checkpoints import (
    CheckpointError,
    check_compatible,
    is_distributed_checkpoint,
    load_model,
    read_info,
)
from sapiens2_ft.models.factory import LoadReport, configure, from_pretrained_checked


def _load_exported(path: Path, model_class: type, task: str, attn_implementation: str) -> tuple[nn.Module, list[str]]:
    config = Sapiens2Config.from_pretrained(path, trust_remote_code=False)
    architecture = (config.architectures or ["Sapiens2Model"])[0]
    if not architecture.startswith("Sapiens2For"):
        raise CheckpointError(f"model.init_from: {path} holds a {architecture}, not a Sapiens2 task model; "
                              f"a pretrain-only backbone goes in --model.pretrained")
    if architecture != model_class.__name__:
        raise CheckpointError(f"--init_from: {path} holds a {architecture}, this run trains {task} "
                              f"({model_class.__name__}). To start {task} from that backbone, pass it as "
                              f"--model.pretrained.")
    model = from_pretrained_checked(model_class, path, attn_implementation=attn_implementation)
    return model, [config.id2label[i] for i in range(config.num_labels)]


def build_from_run(init_from: str, model_class: type, task: str, labels: Sequence[str], image_size: Sequence[int],
                   heads: dict[str, dict], pos_embed_rescale: float | None = None, flip_pairs=None,
                   attn_implementation: str = "sdpa", kind: str = "output") -> tuple[nn.Module, LoadReport]:
    """The model (a ``model_class``) of an earlier run of ``task``, checked against ``task`` and ``labels`` (``kind``
    names a label in the messages), set up for ``image_size``; ``heads``: the task's released head layouts."""
    path = Path(init_from)
    if path.is_file() or is_distributed_checkpoint(path):
        info = read_info(path)
        check_compatible(path, info.task, info.labels, task, list(labels), "--init_from", kind)
        model, _ = load_model(path, lambda _task: model_class)
        what = f"checkpoint at step {info.global_step}"
    elif (path / "config.json").is_file():
        model, source_labels = _load_exported(path, model_class, task, attn_implementation)
        check_compatible(path, task, source_labels, task, list(labels), "--init_from", kind)
        what = "exported model"
    else:
        raise CheckpointError(f"model.init_from: {path} is neither a checkpoint (.ckpt file or distributed "
                              f"checkpoint directory) nor a model directory with a config.json")
    report = LoadReport(str(path), backbone="pretrained", head="pretrained",
                        notes=[f"init_from: all weights of the {what}; optimiser and step start fresh"])
    configure(model.config, labels, image_size, pos_embed_rescale, flip_pairs, None, heads)
    return model.train(), report
