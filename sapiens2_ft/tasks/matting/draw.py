"""How mattes are drawn, everywhere (validation panels, data sheet, predict's sheets, saved composites): a
foreground cut out by its alpha over a checkerboard."""

from __future__ import annotations

import numpy as np

from sapiens2_ft.tasks.sample_pictures import SamplePicture, SheetLabels, image_and_target, sheet_image, sheet_map
from sapiens2_ft.tasks.visualize import matte_composite

TITLE = "matte"


def picture(foreground: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """``foreground`` (H, W, 3, RGB in [0, 255]) over a checkerboard with ``alpha`` (H, W) in [0, 1]."""
    return matte_composite(foreground, alpha)


def draw_sample(item: dict, labels: SheetLabels, factor: float) -> SamplePicture:
    """The data sheet's cell: the image and the image cut out by its alpha."""
    return image_and_target(item, factor, picture(sheet_image(item, factor), sheet_map(item, "alpha", factor)), TITLE)
