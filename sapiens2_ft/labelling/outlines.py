"""A class map as polygons that paint it back exactly: what the tools without masks (Label Studio, LabelMe) get.

Every 4-connected region of one class (the background's too, where another region encloses it) becomes the outline
through the centres of its border pixels (OpenCV's ``findContours``), holes filled: painted with ``cv2.fillPoly``
(a pixel is in when its centre is inside the outline or on it), as ``convert`` paints a tool's polygons
(``convert/shapes.py``), one outline covers its region and whatever it encloses. Painted largest first, every region
then ends on top of the regions that enclose it: a region's filled outline lies inside the hole of any region that
encloses it, so it covers fewer pixels. The largest background region is left out when nothing encloses it
(``convert --unlabelled background`` paints uncovered pixels as class 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import cv2
import numpy as np


@dataclass(frozen=True)
class Outline:
    """One region: its class id, its outline (N, 2) integer pixel centres (x, y) (at least 3 vertices: a region of
    one or two pixels repeats them), the pixels its filled outline covers, and the mean of ``confidence`` over the
    region's own pixels."""

    class_id: int
    points: np.ndarray
    covers: int
    pixels: int
    score: float


def _filled(points: np.ndarray, origin: np.ndarray, shape: tuple[int, int]) -> int:
    """The number of pixels ``points`` covers when filled, in a box of ``shape`` at ``origin``."""
    canvas = np.zeros(shape, np.uint8)
    cv2.fillPoly(canvas, [(points - origin).astype(np.int32).reshape(-1, 1, 2)], 1, lineType=cv2.LINE_8)
    return int(canvas.sum())


def outlines(classes: np.ndarray, confidence: np.ndarray | None = None, background: int | None = 0) -> list[Outline]:
    """The regions of the class map ``classes`` (H, W) integers, in painting order (largest filled outline first).
    ``confidence`` (H, W): a per-pixel score averaged over each region (None: 1). ``background``: the class whose
    unenclosed regions may be left out (None: none is)."""
    classes = np.asarray(classes)
    if classes.ndim != 2:
        raise ValueError(f"a class map is (H, W), got shape {classes.shape}")
    found: list[Outline] = []
    for class_id in np.unique(classes).tolist():
        count, components, stats, _ = cv2.connectedComponentsWithStats((classes == class_id).astype(np.uint8),
                                                                       connectivity=4)
        for k in range(1, count):
            x, y, w, h, pixels = (int(v) for v in stats[k])
            region = (components[y:y + h, x:x + w] == k).astype(np.uint8)
            contours, _ = cv2.findContours(region, cv2.RETR_EXTERNAL, cv2.CHAIN_APPROX_SIMPLE)
            points = contours[0].reshape(-1, 2) + [x, y]
            if len(points) < 3:
                points = np.concatenate([points, points[-1:].repeat(3 - len(points), 0)])
            covers = _filled(points, np.array([x, y]), (h, w))
            score = 1.0 if confidence is None else float(confidence[y:y + h, x:x + w][region > 0].mean())
            found.append(Outline(int(class_id), points.astype(np.int64), covers, pixels, score))
    found.sort(key=lambda o: -o.covers)
    enclosed = _enclosed(found, classes.shape)
    return [o for o, inside in zip(found, enclosed) if inside or o.class_id != background]


def _fill_box(points: np.ndarray) -> tuple[np.ndarray, tuple[int, int], np.ndarray]:
    """The filled outline in its own box: (mask, (x0, y0), points relative to the box)."""
    x0, y0 = points.min(0)
    x1, y1 = points.max(0)
    mask = np.zeros((int(y1 - y0) + 1, int(x1 - x0) + 1), np.uint8)
    local = (points - [x0, y0]).astype(np.int32)
    cv2.fillPoly(mask, [local.reshape(-1, 1, 2)], 1, lineType=cv2.LINE_8)
    return mask > 0, (int(x0), int(y0)), local


def _enclosed(found: list[Outline], shape: tuple[int, int]) -> list[bool]:
    """Whether each region (in painting order) lies under an earlier region's filled outline: painted over, the
    pixels of an unenclosed background region stay uncovered instead."""
    painted = np.zeros(shape, bool)
    flags = []
    for o in found:
        mask, (x0, y0), _ = _fill_box(o.points)
        view = painted[y0:y0 + mask.shape[0], x0:x0 + mask.shape[1]]
        flags.append(bool(view[mask].any()))
        view[mask] = True
    return flags


def paint(found: list[Outline], shape: tuple[int, int], background: int = 0) -> np.ndarray:
    """The class map the outlines paint, in order, over ``background``: what a tool's polygons convert back to."""
    canvas = np.full(shape, background, np.uint8)
    for o in found:
        cv2.fillPoly(canvas, [o.points.astype(np.int32).reshape(-1, 1, 2)], int(o.class_id), lineType=cv2.LINE_8)
    return canvas
