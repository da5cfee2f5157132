"""The multi-task sheet of one image: the image, then each model's picture of its prediction (the task's own
drawing, ``TaskInference.picture``), and the task legends (seg's classes) below."""

from __future__ import annotations

import numpy as np

from sapiens2_ft.tasks.visualize import side_by_side


def sheet(image: np.ndarray, results: dict, inferences: dict, people: np.ndarray | None = None,
          legend: bool = True) -> np.ndarray:
    """One row: the image and each task's picture (``results``/``inferences`` by task, in the order given);
    ``people`` (H, W) bool: where a model found the people (normals and depth are drawn there only); with
    ``legend``, each task's legend below (videos leave it out to keep one frame size)."""
    titles, pictures = ["image"], [image]
    for task, result in results.items():
        title, rgb = inferences[task].picture(result, image, people)
        titles.append(title)
        pictures.append(rgb)
    row = side_by_side(pictures, titles)
    if legend:
        for task, result in results.items():
            row = inferences[task].sheet_legend(row, result)
    return row
