"""How albedo is drawn, everywhere (validation panels, data sheet, predict's sheets, saved pictures): its colours
as they are, the pixels outside the people black."""

from __future__ import annotations

import numpy as np

from sapiens2_ft.tasks.sample_pictures import SamplePicture, SheetLabels, image_and_target, sheet_map

TITLE = "albedo"


def picture(albedo: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """RGB albedo (H, W, 3) in [0, 1] as uint8 RGB; pixels outside ``mask`` (H, W) black."""
    out = (np.clip(albedo, 0.0, 1.0) * 255).round().astype(np.uint8)
    if mask is not None:
        out[~np.asarray(mask, dtype=bool)] = 0
    return out


def draw_sample(item: dict, labels: SheetLabels, factor: float) -> SamplePicture:
    """The data sheet's cell: the image and its albedo over the mask."""
    return image_and_target(item, factor, picture(sheet_map(item, "albedo", factor), sheet_map(item, "mask", factor)),
                            TITLE)
