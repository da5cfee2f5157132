"""How normals are drawn, everywhere (validation panels, data sheet, predict's sheets, saved pictures):
(n + 1) / 2 as RGB, the pixels outside the people black."""

from __future__ import annotations

import numpy as np

from sapiens2_ft.tasks.sample_pictures import SamplePicture, SheetLabels, image_and_target, sheet_map
from sapiens2_ft.tasks.visualize import normal_rgb

TITLE = "normals"


def picture(normals: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Unit normals (H, W, 3) as RGB; pixels outside ``mask`` (H, W) black."""
    return normal_rgb(normals, mask)


def draw_sample(item: dict, labels: SheetLabels, factor: float) -> SamplePicture:
    """The data sheet's cell: the image and its normals over the mask."""
    return image_and_target(item, factor, picture(sheet_map(item, "normals", factor), sheet_map(item, "mask", factor)),
                            TITLE)
