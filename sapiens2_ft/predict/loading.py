"""The model behind ``--model``: an exported directory, a hub id, or a training checkpoint (exported first)."""

from __future__ import annotations

import json
from pathlib import Path

from sapiens2_ft.models.checkpoints import is_distributed_checkpoint
from sapiens2_ft.models.factory import PretrainedNotFoundError, resolve_pretrained
from sapiens2_ft.tasks.registry import import_class, task_of_architecture, task_spec
from sapiens2_ft.training.hf_export import KEYPOINTS_FILE, PREPROCESSOR_FILE, export_checkpoint


def resolve_model(model: str) -> Path:
    """The local directory of ``model`` (a directory or a hub id); errors name ``--model``."""
    try:
        directory = Path(resolve_pretrained(model))
    except PretrainedNotFoundError as err:
        cause = err.__cause__
        if cause is None:  # neither an existing path nor shaped like a hub id
            raise SystemExit(f"--model: '{model}' does not exist (expected an exported directory, a .ckpt, "
                             f"a distributed checkpoint directory or a hub id 'user/name')") from None
        raise SystemExit(f"--model: '{model}' is not a local path and could not be fetched from the Hugging Face "
                         f"Hub ({type(cause).__name__}: {cause}).\nDownload it on a machine with access, e.g. "
                         f"`hf download {model} --local-dir DIR`, copy DIR here and pass `--model DIR`.") from None
    if not (directory / "config.json").is_file():
        raise SystemExit(f"--model: {directory} has no config.json (not an exported model directory)")
    return directory


def exported_input_size(directory: Path, config) -> list[int]:
    """(H, W) an exported model runs at: its ``preprocessor_config.json`` size, else its config's image size."""
    input_size = list(config.image_size)
    if (directory / PREPROCESSOR_FILE).is_file():
        size = json.loads((directory / PREPROCESSOR_FILE).read_text()).get("size") or {}
        input_size = [size.get("height", input_size[0]), size.get("width", input_size[1])]
    return input_size


def load_module(model: str, out: Path, keypoints: str | None = None, device: str = "cpu"):
    """The task's LightningModule around the model at ``model``, in eval mode on ``device``."""
    from transformers import Sapiens2Config

    path = Path(model)
    if path.is_file() or is_distributed_checkpoint(path):
        path = export_checkpoint(path, out / "model")
        print(f"exported checkpoint {model} -> {path}")
    directory = resolve_model(str(path))
    config = Sapiens2Config.from_pretrained(directory)
    architecture = (config.architectures or ["Sapiens2Model"])[0]
    task = task_of_architecture(architecture)
    if task is None or task_spec(task).predictor is None:
        raise SystemExit(f"--model: {model} holds a {architecture}, not a Sapiens2 task model")
    kwargs: dict = {"pretrained": str(directory), "input_size": exported_input_size(directory, config)}
    label_arg = task_spec(task).label_arg
    if label_arg == "keypoints":  # the whole keypoint set (skeleton, flip pairs), exported beside the model
        kwargs["keypoints"] = keypoints or str(directory / KEYPOINTS_FILE)
        if not Path(kwargs["keypoints"]).exists() and keypoints is None:
            raise SystemExit(f"--model: {directory} has no {KEYPOINTS_FILE}; pass --keypoints (a set name or YAML)")
    elif label_arg is not None:
        kwargs[label_arg] = [config.id2label[i] for i in range(config.num_labels)]
    module_class = import_class(task_spec(task).module)
    module = module_class(**kwargs, **module_class.options_from_config(config))
    module.configure_model()
    return module.eval().to(device), task
