"""How shading maps are drawn, everywhere (validation panels, data sheet, predict's sheets): grey, pixels outside
the valid mask black."""

from __future__ import annotations

import numpy as np

from sapiens2_ft.tasks.sample_pictures import SamplePicture, SheetLabels, image_and_target, sheet_map
from sapiens2_ft.tasks.visualize import gray

TITLE = "shading"


def picture(shading: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Shading (H, W) in [0, 1] as RGB grey; pixels outside ``mask`` (H, W) black."""
    out = gray(shading)
    if mask is not None:
        out[~mask.astype(bool)] = 0
    return out


def draw_sample(item: dict, labels: SheetLabels, factor: float) -> SamplePicture:
    """The data sheet's cell: the image and its shading over the mask."""
    return image_and_target(item, factor, picture(sheet_map(item, "shading", factor), sheet_map(item, "mask", factor)),
                            TITLE)
