"""sapiens2-ft: fine-tune Sapiens2 models with PyTorch Lightning, and run them.

The Python API (docs/python_api.md), imported on first use so that ``import sapiens2_ft`` stays light:

- ``sapiens2_ft.train(config="pose_demo.yaml", trainer__max_steps=10)``: a run, as ``train.py``; returns its summary;
- ``sapiens2_ft.load(model_dir)``: a ``Predictor`` whose ``.predict(images)`` runs the model as
  ``python -m sapiens2_ft.predict`` does, one ``Result`` per image whatever the task;
- ``sapiens2_ft.export(checkpoint, out)``: a checkpoint as a Hugging Face model directory, as
  ``python -m sapiens2_ft.export`` (the module of that name is callable for this);
- ``sapiens2_ft.Sapiens2FTError`` and its kinds ``BadInput``, ``BadConfig``, ``NotFound``, ``Refused``: what the
  library and the API raise (``datamodules/errors.py``).
"""

from typing import TYPE_CHECKING

import datamodules.boundary  # noqa: F401  (sets OpenCV's pixel limit before any module loads OpenCV)
from datamodules.errors import BadConfig, BadInput, NotFound, Refused, Sapiens2FTError

if TYPE_CHECKING:
    from sapiens2_ft.api import Predictor, load, train
    from sapiens2_ft.predict.result import Result

__all__ = ["train", "load", "export", "Predictor", "Result", "Sapiens2FTError", "BadInput", "BadConfig", "NotFound",
           "Refused"]


def __getattr__(name: str):
    if name == "export":  # the submodule sapiens2_ft/export.py, itself callable
        from importlib import import_module

        return import_module("sapiens2_ft.export")
    if name == "Result":
        from sapiens2_ft.predict.result import Result

        return Result
    if name in __all__:
        from sapiens2_ft import api

        return getattr(api, name)
    raise AttributeError(f"module 'sapiens2_ft' has no attribute '{name}'")
