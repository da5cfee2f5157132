"""How pointmaps are drawn, everywhere (validation panels, data sheet, predict's sheets, saved pictures): the
inverse depth 1 / Z as turbo (near = red) over the people, the depth picture of the Sapiens2 model cards."""

from __future__ import annotations

import numpy as np

from sapiens2_ft.tasks.sample_pictures import SamplePicture, SheetLabels, image_and_target, sheet_map
from sapiens2_ft.tasks.visualize import inverse_depth_turbo

TITLE = "inverse depth"


def picture(z: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Depth Z (H, W) as RGB; pixels at Z <= 0 or outside ``mask`` black."""
    return inverse_depth_turbo(z, mask)


def draw_sample(item: dict, labels: SheetLabels, factor: float) -> SamplePicture:
    """The data sheet's cell: the image and the inverse depth of its pointmap over the mask."""
    z = sheet_map(item, "pointmap", factor)[..., 2]
    return image_and_target(item, factor, picture(z, sheet_map(item, "mask", factor)), TITLE)
