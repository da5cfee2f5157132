"""Camera orientation and figure placement on a shared ground plane.

World frame: X = image right, Y = up, Z = towards the camera; the camera sits at the
origin and the ground is the plane Y = -camera_height.  A figure's body frame (X = its
left, Y = up, Z = its front) is turned by a yaw about Y, so yaw 0 faces the camera and its
left side appears on the image right.
"""

from dataclasses import dataclass

import numpy as np

from .camera import project
from .figure import Figure
from .geometry import rot_x, rot_y, rot_z
from .sampling import choose

WORLD_TO_LEVEL_CAMERA = np.diag([1.0, -1.0, -1.0])
MIN_GROUND_DISTANCE = 0.75
ATTEMPTS = 20


@dataclass(frozen=True)
class Placement:
    """Rigid transform from a figure's body frame to the camera frame."""

    rotation: np.ndarray
    translation: np.ndarray


def sample_yaw(rng: np.random.Generator) -> float:
    """Facing the camera, sideways or away, with spread."""
    base = choose(rng, (0.0, 90.0, -90.0, 180.0), (0.45, 0.15, 0.15, 0.25))
    return float(np.deg2rad(base + rng.normal(0.0, 25.0)))


def _vertical_extent(figure: Figure) -> tuple:
    low, high = figure.primitives.bounds()
    return float(low[:, 1].min()), float(high[:, 1].max())


def _fits(figure: Figure, placement: Placement, K: np.ndarray, height: int, width: int, margin: float = 0.02) -> bool:
    """Whether the figure's projected bounding box lies inside the image (small slack)."""
    low, high = figure.primitives.transformed(placement.rotation, placement.translation).bounds()
    corners = np.array([[x, y, z] for x in (low[:, 0], high[:, 0]) for y in (low[:, 1], high[:, 1])
                        for z in (low[:, 2], high[:, 2])]).transpose(2, 0, 1).reshape(-1, 3)
    if corners[:, 2].min() <= 0.1:
        return False
    pixels = project(K, corners)
    slack_x, slack_y = margin * width, margin * height
    return bool(pixels[:, 0].min() >= -slack_x and pixels[:, 0].max() <= width - 1 + slack_x
                and pixels[:, 1].min() >= -slack_y and pixels[:, 1].max() <= height - 1 + slack_y)


class _Stage:
    """Camera tilt and ground height shared by all figures of one image."""

    def __init__(self, camera_from_world: np.ndarray, camera_height: float):
        self.camera_from_world = camera_from_world
        self.camera_height = camera_height

    def place(self, bottom: float, x: float, distance: float, yaw: float) -> Placement:
        facing = yaw + np.arctan2(-x, distance)  # yaw is relative to the line of sight
        position = np.array([x, -self.camera_height - bottom, -distance])
        return Placement(self.camera_from_world @ rot_y(facing), self.camera_from_world @ position)


def _main_stage(rng, figure, K, height, width):
    """Frame the main figure: pick its span, image position and the camera tilt."""
    focal, cx, cy = K[0, 0], K[0, 2], K[1, 2]
    bottom, top = _vertical_extent(figure)
    cut = rng.random() < 0.1
    for attempt in range(ATTEMPTS):
        camera_height = rng.uniform(0.6, 1.9)
        span = rng.uniform(0.92, 1.3) if cut else rng.uniform(0.45, 0.9)
        distance = focal * (top - bottom) / (span * height)
        u = cx + rng.uniform(-0.5, 0.5) * width if cut else cx + rng.uniform(-0.2, 0.2) * width
        target_v = cy + rng.uniform(-1, 1) * max(0.0, 1.0 - span) / 2 * height * 0.8
        middle_height = -camera_height + (top - bottom) / 2
        tilt = np.clip(-np.arctan2(middle_height, distance) - np.arctan((target_v - cy) / focal), -0.7, 0.7)
        camera_from_world = rot_z(np.deg2rad(rng.uniform(-4, 4))) @ rot_x(tilt) @ WORLD_TO_LEVEL_CAMERA
        stage = _Stage(camera_from_world, camera_height)
        x = (u - cx) / focal * distance
        placement = stage.place(bottom, x, distance, sample_yaw(rng))
        if cut or attempt == ATTEMPTS - 1 or _fits(figure, placement, K, height, width):
            return stage, placement, (x, distance)


def place_figures(rng: np.random.Generator, K: np.ndarray, height: int, width: int, figures: list) -> list:
    """Placements (body -> camera) for body-frame figures; the first is the main one.

    The main figure usually spans 45-90% of the image height and fits in the frame
    (10%: larger or shifted so the border cuts it); the camera is tilted to frame it.
    Others stand on the same ground at other depths and beside or behind it, so they often
    overlap; most fit in the frame, some are cut.  A figure that cannot be placed without
    crowding another gets ``None``.
    """
    focal, cx = K[0, 0], K[0, 2]
    stage, main_placement, main_spot = _main_stage(rng, figures[0], K, height, width)
    main_u = cx + main_spot[0] / main_spot[1] * focal
    placements, ground = [main_placement], [main_spot]
    for figure in figures[1:]:
        bottom, top = _vertical_extent(figure)
        allow_cut = rng.random() < 0.2
        yaw = sample_yaw(rng)
        chosen = None
        for _ in range(ATTEMPTS):
            distance = main_spot[1] * np.exp(rng.uniform(np.log(0.6), np.log(1.8)))
            span = focal * (top - bottom) / (distance * height)
            offset = (1.0 if rng.random() < 0.5 else -1.0) * rng.uniform(0.1, 0.55) * width
            u = np.clip(main_u + offset, 0.0, width - 1.0)
            x = (u - cx) / focal * distance
            crowded = any(np.hypot(x - gx, distance - gd) < MIN_GROUND_DISTANCE for gx, gd in ground)
            if crowded or not 0.3 <= span <= 1.0:
                continue
            placement = stage.place(bottom, x, distance, yaw)
            if allow_cut or _fits(figure, placement, K, height, width, margin=0.05):
                chosen = placement
                ground.append((x, distance))
                break
        placements.append(chosen)
    return placements
