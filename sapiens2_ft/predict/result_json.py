"""One image's prediction as plain JSON data: what the server answers (``sapiens2-ft serve``), what the web demo shows
per task, and what a script makes of the Python API's results, from one function.

``{"name", "width", "height", "task", **findings}``: the image (its name, or None for an array; its size), the
model's task and what its inference object found (``TaskInference.findings``: pose's people with their box, score and
keypoints by name as ``[x, y, score]``; seg's class areas; pointmap's depth range; matting's foreground area), plus,
when asked for, ``files``: the files ``predict`` writes of the image (``NAME<suffix>``), each as the base64 of the
bytes predict writes (PNG pictures in their colours, ``.npy`` arrays).
"""

from __future__ import annotations

import base64
from typing import Iterable

import numpy as np

from datamodules.boundary.writes import encode_array, encode_image
from sapiens2_ft.tasks.inference import TaskInference


def file_bytes(suffix: str, array: np.ndarray) -> bytes:
    """The bytes ``predict`` writes as ``NAME<suffix>``: an ``.npy`` array, else a picture encoded by the suffix."""
    return encode_array(array) if suffix.endswith(".npy") else encode_image(suffix, array)


def result_json(inference: TaskInference, output, size: tuple[int, int], name: str | None = None,
                files: Iterable[str] = ()) -> dict:
    """The JSON of one image's prediction (see the module docstring). ``output``: what the task's inference object
    gives for the image, as ``Predictor.predict`` returns it (pose: its ``people``; a whole-image task: its
    ``files``); ``size``: the image's (height, width); ``files``: suffixes of ``output``'s files to include (a
    whole-image task), each as base64."""
    height, width = int(size[0]), int(size[1])
    found = {"name": name, "width": width, "height": height, "task": inference.task, **inference.findings(output)}
    files = list(files)
    if files:
        found["files"] = {suffix: base64.b64encode(file_bytes(suffix, output[suffix])).decode("ascii")
                          for suffix in files}
    return found


def api_result_json(predictor, result: dict, size: tuple[int, int], files: Iterable[str] = ()) -> dict:
    """``result_json`` of one result of ``sapiens2_ft.load(...).predict`` (``predictor``: what ``load`` returned;
    ``size``: the image's (height, width)): the JSON ``sapiens2-ft serve`` answers for the same image and boxes."""
    output = result["people"] if predictor.inference.takes_person_boxes else result["files"]
    return result_json(predictor.inference, output, size, result.get("name"), files)
