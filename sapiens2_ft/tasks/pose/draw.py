"""How pose is drawn, everywhere: one person's skeleton (``skeleton``), used by the validation panels, the data
sheet (coloured by keypoint side, with its mirror image: ``draw_sample``) and predict's sheets and videos
(``draw_people``)."""

from __future__ import annotations

import re
from typing import Sequence

import cv2
import numpy as np

from datamodules.keypoints.metainfo import KeypointMetainfo
from sapiens2_ft.tasks.sample_pictures import SamplePicture, SheetLabels, as_numpy, caption, display_image, scaled

CENTRE, LEFT, RIGHT = 0, 1, 2
SIDE_COLORS = {CENTRE: (60, 220, 60), LEFT: (40, 130, 255), RIGHT: (255, 120, 0)}  # RGB
SIDE_NAMES = {CENTRE: "centre", LEFT: "left", RIGHT: "right"}
_SIDE_WORDS = {"left": LEFT, "l": LEFT, "right": RIGHT, "r": RIGHT}
TRUTH_COLOR, PREDICTED_COLOR = (0, 255, 0), (255, 128, 0)  # validation panels
TRACK_COLORS = [(0, 255, 0), (255, 80, 80), (80, 160, 255), (255, 220, 0), (255, 0, 255), (0, 255, 255),
                (255, 140, 0), (160, 90, 255)]  # a person's colour in predict's sheets and videos: by track id
KEYPOINT_DRAW_THRESHOLD = 0.3  # predicted keypoints are drawn when scored above this


def skeleton(image: np.ndarray, points: np.ndarray, shown: np.ndarray, links: Sequence[Sequence[int]],
             colors) -> np.ndarray:
    """Links and filled joints of one person (points (K, 2) pixels, ``shown`` (K,) bool). ``colors``: one RGB
    colour, or one per keypoint (K, 3); a link between joints of two colours is drawn in the centre colour
    (``SIDE_COLORS[CENTRE]``)."""
    out = np.ascontiguousarray(image.copy())
    per_point = np.broadcast_to(np.asarray(colors, np.int64).reshape(-1, 3), (len(points), 3))
    width = max(1, round(max(image.shape[:2]) / 256))
    at = [tuple(int(round(v)) for v in p) for p in points]
    for a, b in links:
        if shown[a] and shown[b]:
            same = (per_point[a] == per_point[b]).all()
            color = tuple(int(c) for c in (per_point[a] if same else SIDE_COLORS[CENTRE]))
            cv2.line(out, at[a], at[b], color, width, cv2.LINE_AA)
    for k in np.flatnonzero(shown):
        cv2.circle(out, at[k], 2 * width + 2, (0, 0, 0), 1, cv2.LINE_AA)
        cv2.circle(out, at[k], 2 * width + 1, tuple(int(c) for c in per_point[k]), -1, cv2.LINE_AA)
    return out


def draw_people(image: np.ndarray, people: list[dict], links: Sequence[Sequence[int]]) -> np.ndarray:
    """Predict's picture: every person (``points``, ``scores``; a ``track_id`` in videos, drawn by its box and
    picking the colour) with the keypoints scored above ``KEYPOINT_DRAW_THRESHOLD``."""
    out = image.copy()
    for person in people:
        color = TRACK_COLORS[person.get("track_id", 0) % len(TRACK_COLORS)]
        out = skeleton(out, person["points"], person["scores"] > KEYPOINT_DRAW_THRESHOLD, links, color)
        if "track_id" in person:
            x, y = (int(v) for v in person["bbox"][:2])
            cv2.putText(out, str(person["track_id"]), (x + 2, y + 14), cv2.FONT_HERSHEY_SIMPLEX, 0.5, color, 1,
                        cv2.LINE_AA)
    return out


def keypoint_sides(metainfo: KeypointMetainfo) -> np.ndarray:
    """(K,) side of each keypoint: a ``left``/``l`` or ``right``/``r`` word in its name (whatever the flip pairs
    say, so that a wrong pair shows); a flip pair whose names carry neither (``face-0`` / ``face-16``) gets left
    for its lower index, right for the other; the rest are centre."""
    sides = np.full(metainfo.num_keypoints, CENTRE)
    for k, (name, partner) in enumerate(zip(metainfo.keypoint_names, metainfo.flip_indices)):
        words = [_SIDE_WORDS[w] for w in re.split(r"[^a-z0-9]+", name.lower()) if w in _SIDE_WORDS]
        if words:
            sides[k] = words[0]
        elif partner != k:
            sides[k] = LEFT if k < partner else RIGHT
    return sides


def flipped_keypoints(points: np.ndarray, shown: np.ndarray, flip_indices: Sequence[int],
                      width: int) -> tuple[np.ndarray, np.ndarray]:
    """The keypoints of the horizontally mirrored crop: x -> (W - 1) - x (the crop's own flip, as in
    ``datamodules/transforms/affine.hflip_matrix``), rows swapped by the set's flip pairs."""
    flip = np.asarray(flip_indices)
    mirrored = points[flip].copy()
    mirrored[:, 0] = (width - 1) - mirrored[:, 0]
    return mirrored, shown[flip]


def draw_sample(item: dict, labels: SheetLabels, factor: float) -> SamplePicture:
    """The data sheet's cell: the crop with its keypoints and skeleton coloured left / right, and its mirror image
    with the keypoints flipped by the set's flip pairs: where the pairs are right, the left colour stays on the
    figure's left (the same side of the picture as in the crop); a swapped or missing pair changes sides."""
    metainfo = labels.metainfo
    if metainfo is None:
        raise ValueError("the pose data sheet needs the data module's keypoint set (its `metainfo`)")
    image = display_image(item["image"])
    points = as_numpy(item["keypoints"]).astype(np.float64)
    shown = as_numpy(item["keypoint_weights"]) > 0
    mirrored, mirrored_shown = flipped_keypoints(points, shown, metainfo.flip_indices, image.shape[1])
    sides = keypoint_sides(metainfo)
    colors = np.array([SIDE_COLORS[s] for s in sides])

    def drawn(picture, at, visible):  # drawn after scaling: lines stay thin and sharp
        return skeleton(scaled(picture, factor), (at + 0.5) * factor - 0.5, visible, metainfo.skeleton, colors)

    tiles = [drawn(image, points, shown), drawn(image[:, ::-1], mirrored, mirrored_shown)]
    key = tuple((SIDE_NAMES[s], SIDE_COLORS[s]) for s in (LEFT, RIGHT, CENTRE) if (sides == s).any())
    return SamplePicture(tiles, [caption(item), "flipped"], key=key)
