"""The options every run of a model takes, checked once for the command line and the Python API: ``predict``'s
``--batch_size``, ``--focal``, ``--fps``, ``--precision`` and the Python API's ``batch_size``, ``focal``, ``fps``,
``precision`` are refused with the same words (the option named as its caller spells it), and ``uses_bf16`` is the
one rule of ``precision="auto"`` for predict, the API and the web demo."""

from __future__ import annotations

import torch

from sapiens2_ft.tasks.inference import TaskInference

PRECISIONS = ("auto", "fp32", "bf16")  # predict --precision, load(precision=...)


def uses_bf16(precision: str, device: str | torch.device, backend: str = "torch") -> bool:
    """Whether models run under bf16 autocast: ``bf16``, or ``auto`` on a GPU with the torch backend (fp32 on the
    CPU and for ONNX graphs)."""
    return precision == "bf16" or (precision == "auto" and torch.device(device).type == "cuda" and backend == "torch")


def option_problems(flag: str, batch_size: int = 1, focal: float | None = None, fps: float | None = None,
                    precision: str = "auto") -> list[str]:
    """The problems of the options every run of a model takes, each named ``flag + option`` (``--focal`` on the
    command line, ``focal`` in the Python API): one check for both."""
    problems = []
    if focal is not None and not focal > 0:
        problems.append(f"{flag}focal: the focal length in pixels must be > 0, got {focal}")
    if fps is not None and not fps > 0:
        problems.append(f"{flag}fps: frames per second must be > 0, got {fps}")
    if not (isinstance(batch_size, int) and batch_size >= 1):
        problems.append(f"{flag}batch_size: give at least 1 image per forward pass, got {batch_size}")
    if precision not in PRECISIONS:
        problems.append(f"{flag}precision: one of {', '.join(PRECISIONS)}, got {precision!r}")
    return problems


def model_problems(flag: str, inferences: list[TaskInference], focal: float | None, boxes: list[str],
                   model: str) -> list[str]:
    """The problems of options that fit some models only, once the models are loaded: a focal for models that take
    none, person ``boxes`` (the box options given) for models that crop none (``model``: the first one's name)."""
    problems = []
    if focal is not None and not any(inference.takes_focal for inference in inferences):
        problems.append(f"{flag}focal is for pointmap models; {', '.join(i.task for i in inferences)} do not take a "
                        f"focal")
    if boxes and not any(inference.takes_person_boxes for inference in inferences):
        problems.append(f"{', '.join(boxes)}: person boxes are for pose models; {model} is {inferences[0].task}")
    return problems
