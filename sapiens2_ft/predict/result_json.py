"""One image's prediction as plain JSON data with its files: what the server answers (``sapiens2-ft serve``).

``Result.to_dict()`` (the image's name and size, the model's task and what it found, as the web demo and the Python
API give it), plus, when asked for, ``files``: the files ``predict`` writes of the image (``NAME<suffix>``), each as
the base64 of the bytes predict writes (``tasks.inference.file_bytes``: PNG pictures in their colours, ``.npy``
arrays, a pointmap's ``.ply``).
"""

from __future__ import annotations

import base64
from typing import Iterable

from sapiens2_ft.predict.result import Result
from sapiens2_ft.tasks.inference import file_bytes

UNSET = object()


def result_json(result: Result, files: Iterable[str] = (), name=UNSET) -> dict:
    """``result.to_dict()``, named ``name`` when given, with the base64 of each of its ``files`` (suffixes of a
    whole-image task's ``result.files``)."""
    found = result.to_dict()
    if name is not UNSET:
        found["name"] = name
    files = list(files)
    if files:
        found["files"] = {suffix: base64.b64encode(file_bytes(suffix, result.files[suffix])).decode("ascii")
                          for suffix in files}
    return found
