"""The model behind ``--model``: an exported directory, a hub id, or a training checkpoint (exported first)."""

from __future__ import annotations

from pathlib import Path

from sapiens2_ft.models.checkpoints import is_distributed_checkpoint
from sapiens2_ft.models.factory import PretrainedNotFoundError, resolve_pretrained
from sapiens2_ft.tasks.registry import TASKS, import_class, task_of_config, task_spec
from sapiens2_ft.training.hf_export import export_checkpoint, exported_input_size


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
                         f"Hub ({type(cause).__name__}: {cause}).\nA gated model (the Sapiens2 ones are): accept its "
                         f"licence on https://huggingface.co/{model} and run `hf auth login`. Offline: download it on a "
                         f"machine with access, e.g. `hf download {model} --local-dir DIR`, copy DIR here and pass "
                         f"`--model DIR` (docs/models.md).") from None
    if not (directory / "config.json").is_file():
        raise SystemExit(f"--model: {directory} has no config.json (not an exported model directory)")
    return directory


def load_module(model: str, out: Path, keypoints: str | None = None, device: str = "cpu", backend: str = "torch"):
    """The task's LightningModule around the model at ``model``, in eval mode on ``device``. ``backend``
    ``onnxruntime``: the network runs as the directory's ``model.onnx`` (a checkpoint's is exported here first)
    and the module's own pre- and post-processing around it."""
    from transformers import Sapiens2Config

    path = Path(model)
    exported_here = path.is_file() or is_distributed_checkpoint(path)
    if exported_here:
        try:
            path = export_checkpoint(path, out / "model")
        except ValueError as err:  # a refused checkpoint (CheckpointError) or output folder (ExportFolderError)
            raise SystemExit(f"--model: {err}") from None
        print(f"exported checkpoint {model} -> {path}")
    directory = resolve_model(str(path))
    config = Sapiens2Config.from_pretrained(directory, trust_remote_code=False)
    architecture = (config.architectures or ["Sapiens2Model"])[0]
    task = task_of_config(config)
    if task is not None and task not in TASKS:
        raise SystemExit(f"--model: {model} is a model of task '{task}', which this installation does not have "
                         f"(known: {', '.join(TASKS)})")
    if task is None or task_spec(task).predictor is None:
        raise SystemExit(f"--model: {model} holds a {architecture}, not a Sapiens2 task model")
    module_class = import_class(task_spec(task).module)
    try:  # the label set (pose: the export's keypoints.yaml, a released model's built-in set, or --keypoints)
        options = module_class.options_from_model(directory, config, keypoints)
    except ValueError as err:
        raise SystemExit(f"--model {model}{f' --keypoints {keypoints}' if keypoints else ''}: {err}") from None
    module = module_class(pretrained=str(directory), input_size=exported_input_size(directory, config), **options)
    module.configure_model()
    module = module.eval().to(device)
    if backend == "onnxruntime":
        module.model = onnx_backend(directory, module.model.config, exported_here)
    return module, task


def onnx_backend(directory: Path, config, export: bool):
    """The ``OnnxModel`` of ``directory/model.onnx`` (written first when ``export``, else it must exist)."""
    from sapiens2_ft.models.onnx import ONNX_FILE, OnnxModel

    if not (directory / ONNX_FILE).is_file():
        if not export:
            raise SystemExit(f"--backend onnxruntime: {directory} has no {ONNX_FILE}; add it with "
                             f"`sapiens2-ft export --checkpoint {directory} --format onnx`")
        from sapiens2_ft.training.onnx_export import write_onnx

        write_onnx(directory)
    return OnnxModel(directory / ONNX_FILE, config)
