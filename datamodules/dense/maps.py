"""How each kind of map in a dense sample follows the image: declared by the task that reads it (its target spec's
``maps``), applied by ``dense.geometry`` (warps and flips) and ``dense.transforms`` (colour changes).

The data layer knows three entries of a sample by itself: ``image`` (HxWx3 uint8), ``mask`` (HxW bool, the pixels
whose targets are known) and ``K`` (3x3 camera intrinsics). Every other map is declared with a ``MapRule``; the rules
below are the kinds the built-in tasks read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Literal

import numpy as np


@dataclass(frozen=True)
class MapRule:
    """How one kind of map moves with the image.

    Args:
        warp: ``linear`` (values that blend, as an image's) or ``nearest`` (values kept: ids, depths, points).
        classes: Class ids: pixels from outside the source take the warp's label border (255 = ignore; a rotation's
            corners 0), and a flip swaps Left / Right classes through the flip table.
        vector: Camera-axis vectors (x right, y down, z forward) per pixel: a flip negates x.
        unit: Unit vectors: a rotation turns their (x, y) with the image; after a warp they are made unit again, and
            blends shorter than 0.5 are zeroed and leave the mask.
        valid: Which pixels stay valid after a warp (``mask`` keeps only those); None: all.
        colour: Colours of the image: they take its colour changes (the generic pipeline's), so that the image stays
            their blend with the background.
    """

    warp: Literal["linear", "nearest"] = "linear"
    classes: bool = False
    vector: bool = False
    unit: bool = False
    valid: Callable[[np.ndarray], np.ndarray] | None = None
    colour: bool = False


def positive(values: np.ndarray) -> np.ndarray:
    """Pixels of a value above 0 (a depth)."""
    return values > 0


def in_front(points: np.ndarray) -> np.ndarray:
    """Pixels whose camera point (HxWx3) lies in front of the camera (Z > 0)."""
    return points[..., 2] > 0


VALUES = MapRule("linear")  # values that blend, only mirrored by a flip (a matte, an albedo)
COLOURS = MapRule("linear", colour=True)  # colours of the image (a matting foreground)
CLASS_IDS = MapRule("nearest", classes=True)  # per-pixel class ids (uint8, 255 = ignore)
UNIT_VECTORS = MapRule("linear", vector=True, unit=True)  # camera-space unit vectors (surface normals)
DEPTHS = MapRule("nearest", valid=positive)  # z-depth; 0 where unknown
POINTS = MapRule("nearest", vector=True, valid=in_front)  # camera XYZ per pixel
