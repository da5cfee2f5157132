"""A Sapiens2 model as an ONNX graph, and an onnxruntime session that stands in for the transformers model.

``export_onnx`` traces the model with ``torch.onnx.export`` (the ``torch.export`` based exporter: dynamic batch,
the input size fixed), naming the graph's outputs after the fields of the model's output (``heatmaps``,
``logits``, ``normals``, ``pointmaps`` + ``scales``, ``alphas`` + ``foregrounds``), and checks it with
``onnx.checker``. ``OnnxModel`` is called like the transformers model (``model(pixel_values).heatmaps``), so the
task modules' flip test, decoding and post-processing run unchanged on its outputs. Knows no task names.

Needs the ``onnx`` extra: ``pip install sapiens2-ft[onnx]`` (onnx, onnxscript, onnxruntime).
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

import torch
from torch import nn

from datamodules.errors import NotFound

ONNX_FILE = "model.onnx"
DTYPES = {"float32": torch.float32, "float16": torch.float16}


def require(module: str):
    """Import an optional ONNX package, or NotFound naming the extra to install."""
    import importlib

    try:
        return importlib.import_module(module)
    except ImportError:
        raise NotFound(f"ONNX needs '{module}': pip install 'sapiens2-ft[onnx]' (onnx, onnxscript, "
                       f"onnxruntime)") from None


class OutputTuple(nn.Module):
    """The model with its output fields as a tuple (what an ONNX graph returns)."""

    def __init__(self, model: nn.Module, names: Sequence[str]):
        super().__init__()
        self.model, self.names = model, tuple(names)

    def forward(self, pixel_values: torch.Tensor) -> tuple[torch.Tensor, ...]:
        out = self.model(pixel_values=pixel_values)
        return tuple(out[name] for name in self.names)


def output_names(model: nn.Module, example: torch.Tensor) -> list[str]:
    """The tensor fields of ``model``'s output, in order."""
    with torch.no_grad():
        out = model(pixel_values=example)
    return [name for name, value in out.items() if isinstance(value, torch.Tensor)]


def export_onnx(model: nn.Module, input_size: Sequence[int], path: str | Path, dtype: str = "float32",
                max_batch: int = 1024) -> list[str]:
    """Write ``model`` (eval mode, on the CPU) to ``path`` for inputs (B, 3, H, W) of ``dtype``, B from 1 to
    ``max_batch``; returns the output names. The graph is checked with ``onnx.checker``."""
    onnx = require("onnx")
    require("onnxscript")
    model = model.eval().to("cpu", DTYPES[dtype])
    example = torch.zeros(2, 3, *input_size, dtype=DTYPES[dtype])
    names = output_names(model, example)
    batch = torch.export.Dim("batch", min=1, max=max_batch)
    program = torch.onnx.export(OutputTuple(model, names), (example,), dynamo=True, input_names=["pixel_values"],
                                output_names=names, dynamic_shapes={"pixel_values": {0: batch}},
                                optimize=True, verbose=False)
    program.save(str(path))
    onnx.checker.check_model(str(path), full_check=True)
    return names


class Outputs(dict):
    """Outputs by name, read as attributes like a transformers ``ModelOutput``; a field the graph lacks is None."""

    def __getattr__(self, name: str):
        return self.get(name)


PROVIDERS = ("TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider")  # the order tried


def preferred_providers(available: Sequence[str]) -> list[str]:
    """The onnxruntime execution providers of ``PROVIDERS`` that this install has, fastest first; the CPU always
    last (onnxruntime falls back along the list, node by node)."""
    return [p for p in PROVIDERS if p in available and p != "CPUExecutionProvider"] + ["CPUExecutionProvider"]


class OnnxModel(nn.Module):
    """An onnxruntime session called like the transformers model: ``model(pixel_values)`` returns an object with
    the graph's outputs as torch tensors by name; ``config`` is the transformers config. A module without
    parameters, so that it takes the transformers model's place in a task module."""

    def __init__(self, path: str | Path, config, providers: Sequence[str] | None = None):
        super().__init__()
        ort = require("onnxruntime")
        self.config = config
        self.session = ort.InferenceSession(str(path), providers=list(providers or
                                                                      preferred_providers(ort.get_available_providers())))
        self.input = self.session.get_inputs()[0]
        self.names = [o.name for o in self.session.get_outputs()]
        self.numpy_dtype = {"tensor(float)": "float32", "tensor(float16)": "float16"}[self.input.type]

    def forward(self, pixel_values: torch.Tensor, **_) -> Outputs:
        device = pixel_values.device
        feed = pixel_values.detach().cpu().float().numpy().astype(self.numpy_dtype)
        outputs = self.session.run(self.names, {self.input.name: feed})
        return Outputs({name: torch.from_numpy(value).float().to(device) for name, value in zip(self.names, outputs)})
