"""An exported model directory (``training/hf_export.py``) plus its ONNX graph: ``DIR/model.onnx``
(``models/onnx.py``) and ``DIR/onnx_config.json``, what a runtime needs around the graph (input size, colour
order and normalisation, resize rule, labels, flip pairs, output shapes and how to decode them: the task's
``TaskSpec.export.decode``). Used by ``export --format onnx`` and ``predict --backend onnxruntime``; docs/deploy.md."""

from __future__ import annotations

import time
from pathlib import Path

import torch

from datamodules.boundary.files import read_json
from datamodules.boundary.folders import handed_file
from datamodules.boundary.writes import staged, write_json
from datamodules.dense.pipelines import LETTERBOX, STRETCH
from sapiens2_ft.models.onnx import DTYPES, ONNX_FILE, export_onnx
from sapiens2_ft.models.preprocessing import IMAGE_MEAN, IMAGE_STD
from sapiens2_ft.tasks.registry import TASKS, model_class, takes_person_boxes, task_of_config, task_spec
from sapiens2_ft.tasks.saved_model import PREPROCESSOR_FILE, exported_input_size
from sapiens2_ft.training.export_dir import export_files, recording

ONNX_CONFIG_FILE = "onnx_config.json"
# A whole-image task's resize (``TaskSpec.resize``): the runtime's step before the graph and the one after its decode.
RESIZE_STEPS = {
    LETTERBOX: ("letterbox (keep aspect, centred, zero padding)",
                "Then remove the letterbox's padding (the image fitted inside the input, centred) and resize to the "
                "image size."),
    STRETCH: ("stretch", "Then resize to the image size (undoing the stretch)."),
}
CROP = "person crop: box widened to the input aspect, affine-warped"


def onnx_config(directory: Path, config, task: str, names: list[str], shapes: dict, dtype: str) -> dict:
    """The runtime's side of the graph: input, normalisation, resize rule, labels, outputs and their decoding."""
    processor = read_json(handed_file(directory, PREPROCESSOR_FILE))
    size = processor["size"]
    spec = task_spec(task)
    resize, undo = (CROP, "") if takes_person_boxes(task) else RESIZE_STEPS[spec.resize]
    return {
        "model": ONNX_FILE, "task": task, "architecture": config.architectures[0], "dtype": dtype,
        "input": {"name": "pixel_values", "shape": ["batch", 3, size["height"], size["width"]], "layout": "NCHW",
                  "color": "RGB", "normalize": "(value - mean) / std, values in 0-255", "mean": list(IMAGE_MEAN),
                  "std": list(IMAGE_STD), "resize": resize},
        "outputs": {name: ["batch", *shapes[name][1:]] for name in names},
        "labels": [config.id2label[i] for i in range(config.num_labels)],
        "flip_pairs": [list(p) for p in (getattr(config, "flip_pairs", None) or [])],
        "heatmap_output": getattr(config, "heatmap_output", None),
        "decode": " ".join(part for part in (spec.export.decode, undo) if part),
        "preprocessor": processor,
    }


def write_onnx(directory: str | Path, dtype: str = "float32") -> Path:
    """``directory/model.onnx`` and ``onnx_config.json`` of the exported model in ``directory``."""
    from transformers import Sapiens2Config

    directory = Path(directory)
    export_files(directory)  # a link among the export's files is refused before anything reads it
    config = Sapiens2Config.from_pretrained(directory, trust_remote_code=False)
    task = task_of_config(config)
    if task not in TASKS:
        raise ValueError(f"{directory} holds no Sapiens2 task model of this installation (task {task}, "
                         f"architecture {config.architectures})")
    model = model_class(task).from_pretrained(directory, trust_remote_code=False).eval()
    input_size = exported_input_size(directory, config)
    started = time.time()
    with recording(directory, start=False):  # the export's files, where the folder is an export of this project
        with staged(directory) as stage:  # the graph (and its data file) renamed over the names, never through a link
            names = export_onnx(model, input_size, stage / ONNX_FILE, dtype)
        with torch.no_grad():
            out = model.to(DTYPES[dtype])(pixel_values=torch.zeros(1, 3, *input_size, dtype=DTYPES[dtype]))
        shapes = {name: list(out[name].shape) for name in names}
        write_json(directory, ONNX_CONFIG_FILE, onnx_config(directory, model.config, task, names, shapes, dtype),
                   indent=2)
    print(f"ONNX model ({dtype}, outputs {', '.join(names)}) -> {directory / ONNX_FILE} "
          f"in {time.time() - started:.1f} s")
    return directory / ONNX_FILE
