"""The model behind ``--model``: an exported directory, a hub id, or a training checkpoint (exported first), as the
task's inference object (``tasks/inference.py``)."""

from __future__ import annotations

from pathlib import Path

from datamodules.errors import BadInput, NotFound, restated
from sapiens2_ft.models.checkpoints import is_distributed_checkpoint
from sapiens2_ft.models.factory import PretrainedNotFoundError, fetch_failure, resolve_pretrained
from sapiens2_ft.tasks.inference import TaskInference
from sapiens2_ft.tasks.saved_model import SavedModelError, load_inference as load_saved


def model_problem(model: str) -> str | None:
    """Why ``--model`` cannot be what it names, seen without loading anything (a path that does not exist and is
    not shaped like a hub id 'user/name'); None when it may be."""
    path = Path(model)
    if path.exists() or (not model.startswith((".", "/", "~")) and model.count("/") == 1):
        return None
    return (f"--model: '{model}' does not exist (expected an exported directory, a .ckpt, a distributed checkpoint "
            f"directory or a hub id 'user/name')")


def resolve_model(model: str) -> Path:
    """The local directory of ``model`` (a directory or a hub id); errors name ``--model``."""
    try:
        directory = Path(resolve_pretrained(model))
    except PretrainedNotFoundError as err:
        cause = err.__cause__
        if cause is None:  # neither an existing path nor shaped like a hub id
            raise err.with_message(model_problem(model) or f"--model: '{model}' does not exist") from None
        raise err.with_message(f"--model: {fetch_failure(model, cause, 'model')}") from None
    if not (directory / "config.json").is_file():
        raise BadInput(f"--model: {directory} has no config.json (not an exported model directory)")
    return directory


def load_inference(model: str, out: Path, keypoints: str | None = None, device: str = "cpu",
                   backend: str = "torch") -> tuple[TaskInference, str]:
    """The task's inference object around the model at ``model`` and its task, in eval mode on ``device``.
    ``backend`` ``onnxruntime``: the network runs as the directory's ``model.onnx`` (a checkpoint's is exported here
    first) with the inference object's own pre- and post-processing around it."""
    from transformers import Sapiens2Config

    path = Path(model)
    exported_here = path.is_file() or is_distributed_checkpoint(path)
    if exported_here:
        from sapiens2_ft.training.hf_export import export_checkpoint  # the training stack: checkpoints only

        try:
            path = export_checkpoint(path, out / "model")
        except ValueError as err:  # a refused checkpoint (CheckpointError) or output folder (ExportFolderError)
            raise restated(err, f"--model: {err}") from None
        print(f"exported checkpoint {model} -> {path}")
    directory = resolve_model(str(path))
    config = Sapiens2Config.from_pretrained(directory, trust_remote_code=False)
    try:  # the label set (pose: the export's keypoints.yaml, a released model's built-in set, or --keypoints)
        inference = load_saved(directory, keypoints, config)
    except SavedModelError as err:
        raise err.with_message(f"--model: {model} holds {err}") from None
    except ValueError as err:
        raise BadInput(f"--model {model}{f' --keypoints {keypoints}' if keypoints else ''}: {err}") from None
    if inference.load_report.notes:
        print(inference.load_report)
    inference.to(device)
    if backend == "onnxruntime":
        inference.model = onnx_backend(directory, inference.model.config, exported_here)
    return inference, inference.task


def onnx_backend(directory: Path, config, export: bool):
    """The ``OnnxModel`` of ``directory/model.onnx`` (written first when ``export``, else it must exist)."""
    from sapiens2_ft.models.onnx import ONNX_FILE, OnnxModel

    if not (directory / ONNX_FILE).is_file():
        if not export:
            raise NotFound(f"--backend onnxruntime: {directory} has no {ONNX_FILE}; add it with "
                           f"`sapiens2-ft export --checkpoint {directory} --format onnx`")
        from sapiens2_ft.training.onnx_export import write_onnx

        write_onnx(directory)
    return OnnxModel(directory / ONNX_FILE, config)
