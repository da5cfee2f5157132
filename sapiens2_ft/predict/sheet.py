"""The multi-task sheet of one image: the image, then each model's picture of its prediction (the task's own
drawing, ``Result.picture``), and the task legends (seg's classes) below."""

from __future__ import annotations

import numpy as np

from sapiens2_ft.predict.result import Result
from sapiens2_ft.tasks.visualize import side_by_side


def sheet(image: np.ndarray, results: dict[str, Result], legend: bool = True) -> np.ndarray:
    """One row: the image and each task's picture (``results`` by task, in the order given; normals and depth drawn
    where another model found the people, each result's ``mask``); with ``legend``, each task's legend below
    (videos leave it out to keep one frame size)."""
    titles, pictures = ["image"], [image]
    for result in results.values():
        title, rgb = result.picture()
        titles.append(title)
        pictures.append(rgb)
    row = side_by_side(pictures, titles)
    if legend:
        for result in results.values():
            row = result.inference.sheet_legend(row, result.output)
    return row
