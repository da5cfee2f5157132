"""Reading this framework's training checkpoints without the training config.

Two layouts: a Lightning ``.ckpt`` file (one device, DDP) and an FSDP2 distributed checkpoint
directory (``meta.pt`` + ``.metadata`` + shards, written by ``ModelParallelStrategy``). Every module
stores a ``sapiens2_ft`` record in its checkpoints (task, the transformers model config, the keypoint
set, LoRA settings), so the model can be rebuilt from the checkpoint alone; adapters are merged into the
weights on loading. Only tensors and plain containers are
unpickled (``torch.load(weights_only=True)``; a distributed checkpoint's ``.metadata`` through
``dcp_metadata.read_metadata``); weights whose names or shapes differ from the model
are refused with the differences listed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

import torch
from torch import nn
from transformers import Sapiens2Config

from datamodules.errors import BadInput
from sapiens2_ft.models.adapters import LoraOptions, adapt, merge_lora

RECORD_KEY = "sapiens2_ft"
METADATA_FILE = "meta.pt"  # Lightning's name for the non-tensor part of a distributed checkpoint
WRAPPER = "_checkpoint_wrapped_module."


class CheckpointError(BadInput):
    """A checkpoint cannot be used as asked; the message says why and what to do."""


def model_record(task: str, config, lora: LoraOptions | None = None, extra: dict | None = None) -> dict:
    """What a module stores in its checkpoints to rebuild its model: task, config, the task's own record (``extra``,
    pose: its keypoint set as ``{"keypoints": ...}``; seg: its class set as ``{"classes": ...}``), and the LoRA settings of a model with adapters
    (``{"adapters": {"lora": {"rank", "alpha", ...}}}``)."""
    record = {"task": task, "model_config": config.to_dict(), **(extra or {})}
    if lora is not None and lora.rank > 0:
        record["adapters"] = {"lora": asdict(lora)}
    return record


@dataclass
class CheckpointInfo:
    path: Path
    task: str
    model_config: dict
    keypoints: dict | None  # keypoint metainfo (pose)
    global_step: int
    epoch: int
    wandb_run_id: str | None
    hyper_parameters: dict
    adapters: dict | None = None  # {"lora": LoraOptions fields} when the model was trained with adapters
    validation: dict | None = None  # the run's latest validation when it was saved: {"step", "metrics"}
    epochs_completed: int = 0  # training epochs behind it (the fit loop's processed count: what max_epochs stops at)
    classes: dict | None = None  # the class set (seg trained on one), as its YAML

    @property
    def labels(self) -> list[str]:
        id2label = self.model_config.get("id2label") or {}
        return [id2label[k] for k in sorted(id2label, key=int)]

    def describe(self) -> str:
        return (f"{self.path}: task {self.task}, {len(self.labels)} outputs, step {self.global_step}, "
                f"epoch {self.epoch}")


def is_distributed_checkpoint(path: Path) -> bool:
    return path.is_dir() and (path / METADATA_FILE).is_file()


def _load(path: Path) -> dict:
    try:
        return torch.load(path, map_location="cpu", weights_only=True, mmap=path.suffix != ".pt")
    except Exception as err:
        lines = str(err).splitlines() or [""]
        reason = next((line.strip() for line in lines if "Unsupported global" in line), lines[0])
        raise CheckpointError(f"cannot read checkpoint {path} as tensors and plain data ({type(err).__name__}: "
                              f"{reason}); other objects are not unpickled") from err


def read_info(path: str | Path) -> CheckpointInfo:
    """The record of a ``.ckpt`` file or a distributed checkpoint directory (no weights are read)."""
    path = Path(path)
    if not path.exists():
        raise CheckpointError(f"checkpoint {path} does not exist")
    if path.is_dir() and not is_distributed_checkpoint(path):
        raise CheckpointError(f"{path} is a directory but not a distributed checkpoint (no {METADATA_FILE})")
    data = _load(path / METADATA_FILE if path.is_dir() else path)
    record = data.get(RECORD_KEY)
    if not record or "model_config" not in record:
        raise CheckpointError(f"{path} has no '{RECORD_KEY}' record: it was not written by this framework's modules")
    progress = (((data.get("loops") or {}).get("fit_loop") or {}).get("epoch_progress") or {}).get("current") or {}
    return CheckpointInfo(path=path, task=record["task"], model_config=record["model_config"],
                          keypoints=record.get("keypoints"), global_step=int(data.get("global_step", 0)),
                          epoch=int(data.get("epoch", 0)), wandb_run_id=record.get("wandb_run_id"),
                          hyper_parameters=dict(data.get("hyper_parameters") or {}), adapters=record.get("adapters"),
                          validation=record.get("validation"),
                          epochs_completed=int(progress.get("processed", data.get("epoch", 0))),
                          classes=record.get("classes"))


def model_key(key: str) -> str | None:
    """Lightning module state key -> transformers model key (None for keys outside ``model.``)."""
    if not key.startswith("model."):
        return None
    return key[len("model."):].replace(WRAPPER, "")


def check_keys(expected: dict[str, torch.Size], found: dict[str, torch.Size], source: Path) -> None:
    """Refuse weights whose names or shapes differ from the model's, listing the differences."""
    missing = sorted(set(expected) - set(found))
    unexpected = sorted(set(found) - set(expected))
    shapes = sorted(k for k in set(expected) & set(found) if tuple(expected[k]) != tuple(found[k]))
    if not (missing or unexpected or shapes):
        return

    def listing(title: str, keys: list[str], show=lambda k: k) -> str:
        more = f" (+{len(keys) - 10} more)" if len(keys) > 10 else ""
        return f"\n  {title} ({len(keys)}): " + ", ".join(show(k) for k in keys[:10]) + more if keys else ""

    raise CheckpointError(
        f"weights in {source} do not match the model"
        + listing("missing", missing) + listing("unexpected", unexpected)
        + listing("shape differs", shapes, lambda k: f"{k} {list(found[k])} vs model {list(expected[k])}"))


def _read_file_weights(path: Path) -> dict[str, torch.Tensor]:
    state = _load(path).get("state_dict", {})
    return {name: value for key, value in state.items() if (name := model_key(key)) is not None}


def _read_distributed_weights(path: Path, model: nn.Module) -> dict[str, torch.Tensor]:
    """Only the model tensors of a distributed checkpoint, gathered into this process (no process group)."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.metadata import TensorStorageMetadata

    from sapiens2_ft.models.dcp_metadata import SafeReader, read_metadata  # imports torch's dcp (1.5 s)

    try:
        metadata = read_metadata(path)
    except ValueError as err:
        raise CheckpointError(str(err)) from None
    prefix = "state_dict."
    stored = {key[len(prefix):]: meta for key, meta in metadata.state_dict_metadata.items()
              if key.startswith(prefix) and model_key(key[len(prefix):]) is not None}
    not_tensors = sorted(key for key, meta in stored.items() if not isinstance(meta, TensorStorageMetadata))
    if not_tensors:  # torch would unpickle them (weights_only=False)
        raise CheckpointError(f"{path}: model weights stored as other objects than tensors: {not_tensors[:5]}")
    found = {model_key(key): meta.size for key, meta in stored.items()}
    expected = {k: v.shape for k, v in model.state_dict().items()}
    check_keys(expected, found, path)
    targets = {key: torch.empty(meta.size, dtype=meta.properties.dtype) for key, meta in stored.items()}
    dcp.load({"state_dict": targets}, storage_reader=SafeReader(str(path)), no_dist=True)
    return {model_key(key): value for key, value in targets.items()}


def load_model(path: str | Path, model_class: Callable[[str], type]) -> tuple[nn.Module, CheckpointInfo]:
    """The trained transformers model of a checkpoint (CPU, float32, eval mode) and its record.

    ``model_class(task)``: the transformers class of the record's task (``tasks.registry.model_class``).
    """
    info = read_info(path)
    config = Sapiens2Config.from_dict(info.model_config)
    model = model_class(info.task)(config)
    lora = (info.adapters or {}).get("lora")
    stored = model
    if lora:  # the names and shapes the checkpoint holds: the model with its adapters (on meta, no memory)
        with torch.device("meta"):
            stored = model_class(info.task)(config)
        adapt(stored, lora=LoraOptions(**lora))
    if info.path.is_dir():
        weights = _read_distributed_weights(info.path, stored)
    else:
        weights = _read_file_weights(info.path)
        check_keys({k: v.shape for k, v in stored.state_dict().items()}, {k: v.shape for k, v in weights.items()},
                   info.path)
    if lora:
        weights = merge_lora(weights, lora["alpha"], lora["rank"])
    model.load_state_dict({k: v.float() for k, v in weights.items()}, strict=True)
    return model.eval(), info


def check_compatible(source: str | Path, source_task: str, source_labels: list[str], task: str,
                     labels: list[str], option: str, kind: str = "output") -> None:
    """Refuse weights of another task or another label set for ``option`` (``--resume``, ``--init_from``);
    ``kind`` names a label in the message (``keypoint``, ``class``, ``output``)."""
    if source_task != task:
        raise CheckpointError(f"{option}: {source} holds a {source_task} model, this run trains {task}. "
                              f"To start {task} from that backbone, export it and pass it as --model.pretrained.")
    if list(source_labels) != list(labels):
        changed = [f"#{i}: {a!r} vs {b!r}" for i, (a, b) in enumerate(zip(source_labels, labels)) if a != b][:5]
        raise CheckpointError(
            f"{option}: {source} was trained on another {kind} set: {len(source_labels)} {kind}s there, "
            f"{len(labels)} here" + (f" (first differences: {', '.join(changed)})" if changed else "")
            + f". {option} needs the same set; --model.pretrained with an exported directory transfers "
              f"{kind}s by name instead.")
