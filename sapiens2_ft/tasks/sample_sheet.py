"""The data-check sheet: training samples as the model sees them (after augmentation), with their targets drawn.

``python -m sapiens2_ft.check_data --show N`` writes it from the training loader, ``train.py`` from the first
training batch of every run (``<run_dir>/data_check.png``). Each sample is one cell of a grid: the tiles its
task's ``TaskSpec.data.draw_sample`` returns (``tasks/<task>/draw.py``), each under a caption strip; below the
grid a key of the keypoint sides (pose) or a legend of the classes present (seg).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import torch

from datamodules.boundary.writes import write_image
from sapiens2_ft.tasks.registry import task_spec
from sapiens2_ft.tasks.sample_pictures import SamplePicture, SheetLabels
from sapiens2_ft.tasks.visualize import CAPTION_HEIGHT, class_legend, side_by_side

SHEET_FILE = "data_check.png"
MAX_TILE_HEIGHT = 384  # larger inputs are shrunk on the sheet, smaller than MIN enlarged by a whole factor
MIN_TILE_HEIGHT = 192
GAP = 4  # pixels between cells
BACKGROUND = 16


@dataclass
class ContactSheet:
    """The sheet (RGB uint8) and where things are on it: ``boxes[i][t]`` = (x, y, w, h) of sample ``i``'s tile
    ``t`` (below its caption); ``classes``: the seg classes of its legend; ``factor``: the tiles' display scale."""

    picture: np.ndarray
    boxes: list[list[tuple[int, int, int, int]]]
    classes: list[int]
    factor: float


def sheet_labels(datamodule) -> SheetLabels:
    """The label set of a data module (``datamodules.base.SampleDataModule``): its ``metainfo`` (pose) and
    ``class_names`` (seg), None where it has none."""
    return SheetLabels(datamodule.metainfo, tuple(datamodule.class_names or ()))


def split_batch(batch: dict, count: int) -> list[dict]:
    """The first ``count`` samples of a collated batch as item dicts (tensors moved to the CPU)."""
    size = len(batch["image"])

    def part(value, i):
        if isinstance(value, torch.Tensor) and value.ndim and len(value) == size:
            return value[i].detach().cpu()
        if isinstance(value, (list, tuple)) and len(value) == size:
            return value[i]
        return value

    return [{key: part(value, i) for key, value in batch.items()} for i in range(min(count, size))]


def display_factor(height: int) -> float:
    """Scale of a tile of ``height`` pixels on the sheet."""
    if height > MAX_TILE_HEIGHT:
        return MAX_TILE_HEIGHT / height
    return float(max(1, -(-MIN_TILE_HEIGHT // height)))


def _key_strip(key: tuple, width: int) -> np.ndarray:
    strip = np.full((CAPTION_HEIGHT, width, 3), 32, np.uint8)
    x = 4
    for name, color in key:
        cv2.rectangle(strip, (x, 4), (x + 13, CAPTION_HEIGHT - 5), color, -1)
        cv2.putText(strip, f"{name} keypoints", (x + 19, CAPTION_HEIGHT - 6), cv2.FONT_HERSHEY_SIMPLEX, 0.4,
                    (235, 235, 235), 1, cv2.LINE_AA)
        x += 150
    return strip


def _cell(picture: SamplePicture) -> np.ndarray:
    width = picture.tiles[0].shape[1]
    titles = [title[:max(4, width // 8)] for title in picture.titles]  # ~8 px per caption character
    return side_by_side(picture.tiles, titles, min_height=0)


def data_sheet(task: str, items: list[dict], labels: SheetLabels, columns: int | None = None) -> ContactSheet:
    """The sheet of ``items`` (dataset items or ``split_batch`` parts of one task) in a grid of ``columns``
    cells per row (default: as square as the count allows)."""
    draw = task_spec(task).data.draw_sample
    if draw is None:
        raise ValueError(f"task '{task}' has no data sheet (its TaskSpec.data.draw_sample is unset)")
    if not items:
        raise ValueError("no samples to draw")
    factor = display_factor(int(items[0]["image"].shape[-2]))
    pictures = [draw(item, labels, factor) for item in items]
    cells = [_cell(p) for p in pictures]
    cell_h, cell_w = max(c.shape[0] for c in cells), max(c.shape[1] for c in cells)
    columns = columns or math.ceil(math.sqrt(len(cells)))
    rows = math.ceil(len(cells) / columns)
    width = columns * cell_w + (columns - 1) * GAP
    grid = np.full((rows * cell_h + (rows - 1) * GAP, width, 3), BACKGROUND, np.uint8)
    boxes = []
    for n, (cell, picture) in enumerate(zip(cells, pictures)):
        y, x = (n // columns) * (cell_h + GAP), (n % columns) * (cell_w + GAP)
        grid[y:y + cell.shape[0], x:x + cell.shape[1]] = cell
        offsets = np.cumsum([0] + [t.shape[1] for t in picture.tiles[:-1]])
        boxes.append([(int(x + dx), y + CAPTION_HEIGHT, t.shape[1], t.shape[0])
                      for dx, t in zip(offsets, picture.tiles)])
    parts = [grid]
    key = next((p.key for p in pictures if p.key), ())
    if key:
        parts.append(_key_strip(key, width))
    classes = sorted(set().union(*(p.classes for p in pictures)))
    if classes:
        names = labels.class_names or [str(c) for c in range(classes[-1] + 1)]
        parts.append(class_legend(names, classes, width))
    return ContactSheet(np.concatenate(parts, axis=0), boxes, classes, factor)


def write_sheet(sheet: ContactSheet, path: str | Path) -> Path:
    """``sheet`` as a PNG at ``path`` (folders made as needed)."""
    path = Path(path)
    return write_image(path.parent, path.name, sheet.picture[..., ::-1])
