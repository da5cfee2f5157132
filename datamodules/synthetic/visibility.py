"""Occlusion-aware COCO keypoint visibility from the z-buffer.

A keypoint is visible (v=2) when it projects inside the image and the surface seen at
its pixel belongs to one of the primitives around it (same figure) and lies no further in
front of it than that primitive's reach (see ``Figure.keypoint_reach``: about a limb
radius, more for a limb seen end-on up to a limit, a whole hand/foot for wrists/ankles).
Face points lie on the head surface, must face the camera, and may match anywhere in a
3x3 neighbourhood (they sit near silhouettes).  Inside the image but hidden: v=1.
Outside: v=0 with x=y=0.
"""

import numpy as np

from .camera import project
from .figure import Figure

_ROW_OFFSETS, _COL_OFFSETS = (a.ravel() for a in np.mgrid[-1:2, -1:2])
_CENTRE = (_ROW_OFFSETS == 0) & (_COL_OFFSETS == 0)
MIN_SINE = 0.4  # a limb within ~24 degrees of the line of sight hides joints behind it


def keypoint_visibility(figure: Figure, first_primitive: int, K: np.ndarray, depth: np.ndarray,
                        ids: np.ndarray) -> np.ndarray:
    """(K, 3) array of [x, y, v] for a camera-frame figure whose primitives start at ``first_primitive``.

    ``depth`` is the z-buffer (inf where empty) and ``ids`` the primitive-id buffer (-1 empty).
    """
    height, width = depth.shape
    points = figure.keypoints
    pixels = project(K, points)
    inside = (pixels[:, 0] >= 0) & (pixels[:, 0] <= width - 1) & (pixels[:, 1] >= 0) & (pixels[:, 1] <= height - 1)
    on_surface = np.any(figure.keypoint_normals != 0, axis=1)
    facing = ~on_surface | (np.einsum("ij,ij->i", figure.keypoint_normals, points) < 0)

    rows = np.rint(pixels[:, 1]).astype(np.int64)[:, None] + _ROW_OFFSETS
    cols = np.rint(pixels[:, 0]).astype(np.int64)[:, None] + _COL_OFFSETS
    usable = (on_surface[:, None] | _CENTRE) & (rows >= 0) & (rows < height) & (cols >= 0) & (cols < width)
    rows, cols = np.clip(rows, 0, height - 1), np.clip(cols, 0, width - 1)
    seen = ids[rows, cols] - first_primitive
    tolerance = _tolerance(figure)
    count = tolerance.shape[1]
    own = (seen >= 0) & (seen < count)
    tolerance = tolerance[np.arange(len(points))[:, None], np.clip(seen, 0, count - 1)]
    with np.errstate(invalid="ignore"):
        shows = own & (depth[rows, cols] >= points[:, 2:3] - tolerance)  # False where tolerance is NaN
    visible = inside & facing & np.any(usable & shows, axis=1)

    result = np.zeros((len(points), 3))
    result[inside, :2] = pixels[inside]
    result[:, 2] = np.where(visible, 2, np.where(inside, 1, 0))
    return result


def _tolerance(figure: Figure) -> np.ndarray:
    """(K, n_primitives) metres a primitive's surface may lie in front of each keypoint."""
    slack, radius = figure.keypoint_reach[..., 0], figure.keypoint_reach[..., 1]
    axes = figure.primitives.rotation[:, :, 1]
    sight = figure.keypoints / np.linalg.norm(figure.keypoints, axis=1, keepdims=True)
    sine = np.sqrt(np.clip(1.0 - (sight @ axes.T) ** 2, 0.0, 1.0))
    return slack + radius / np.maximum(sine, MIN_SINE)
