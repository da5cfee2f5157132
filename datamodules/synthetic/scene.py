"""Compose one synthetic image: figures, camera, lighting, background, all dense targets (the albedo: the surface's
base colour before lighting, which the image shades as albedo x (ambient + (1 - ambient) max(n . l, 0)))."""

from dataclasses import dataclass

import cv2
import numpy as np

from .appearance import sample_outfit
from .background import random_background
from .camera import ray_directions, sample_intrinsics
from .figure import build_figure
from .placement import place_figures
from .primitives import Primitives
from .raster import coverage_alpha, pixel_windows, rasterize, surface_frames
from .sampling import choose
from .skeleton import pose_skeleton, sample_body_shape, sample_pose
from .surface import build_surface_table, paint
from .visibility import keypoint_visibility


@dataclass
class Person:
    """One rendered figure: keypoints [x, y, v] (K, 3) (``parts.KEYPOINT_NAMES``) and its visible silhouette."""

    keypoints: np.ndarray
    silhouette: np.ndarray  # HxW bool, pixels whose centre shows this figure


@dataclass
class Sample:
    """Everything rendered for one image (RGB order, camera frame = OpenCV)."""

    image: np.ndarray  # HxWx3 uint8
    labels: np.ndarray  # HxW uint8 Sapiens2 part ids, 0 = background
    normals: np.ndarray  # HxWx3 float32 unit camera-frame normals, 0 on background
    mask: np.ndarray  # HxW bool, a figure covers the pixel centre
    depth: np.ndarray  # HxW float32 z-depth (m), 0 on background
    K: np.ndarray  # 3x3 intrinsics
    alpha: np.ndarray  # HxW float32 in [0,1]
    foreground: np.ndarray  # HxWx3 uint8 un-mixed figure colour (0 where alpha = 0)
    albedo: np.ndarray  # HxWx3 uint8 base colour of the surface before lighting, 0 on background
    figure_map: np.ndarray  # HxW int16 index into ``people``, -1 = background
    people: list


def _sample_light(rng):
    direction = np.array([rng.uniform(-1.0, 1.0), rng.uniform(-1.2, 0.2), -rng.uniform(0.4, 1.5)])
    return direction / np.linalg.norm(direction), rng.uniform(0.25, 0.55)


def _bleed_colours(colour: np.ndarray, mask: np.ndarray, where: np.ndarray) -> None:
    """Fill ``colour`` (zero off the mask) at ``where`` with the mean of its masked 3x3 neighbours."""
    if not where.any():
        return
    total = cv2.boxFilter(colour, -1, (3, 3), normalize=False, borderType=cv2.BORDER_CONSTANT)
    count = cv2.boxFilter(mask.astype(np.float32), -1, (3, 3), normalize=False, borderType=cv2.BORDER_CONSTANT)
    colour[where] = total[where] / np.maximum(count[where], 1.0)[:, None]


def _sample_figures(rng, K, height, width) -> tuple:
    """1-3 posed, dressed figures placed in the camera frame (the first always fits)."""
    count = choose(rng, (1, 2, 3), (0.45, 0.35, 0.2))
    body_figures, outfits = [], []
    for _ in range(count):
        figure = build_figure(pose_skeleton(sample_body_shape(rng), sample_pose(rng)))
        body_figures.append(figure)
        outfits.append(sample_outfit(rng, figure.part_names))
    placements = place_figures(rng, K, height, width, body_figures)
    kept = [i for i, placement in enumerate(placements) if placement is not None]
    figures = [body_figures[i].transformed(placements[i].rotation, placements[i].translation) for i in kept]
    return figures, [outfits[i] for i in kept]


@dataclass
class Scene:
    """What one image is drawn from: camera, background, placed figures with their outfits, and the light."""

    K: np.ndarray  # 3x3 intrinsics
    background: np.ndarray  # HxWx3 float RGB in [0, 1]
    figures: list  # camera-frame Figures
    outfits: list  # one Outfit per figure
    light: np.ndarray  # unit direction towards the light (camera frame)
    ambient: float


def sample_scene(seed: int, index: int, height: int = 256, width: int = 192) -> Scene:
    """The scene of image ``index`` of the dataset with ``seed``: every random draw of an image, in order."""
    rng = np.random.default_rng([seed, index])
    K = sample_intrinsics(rng, height, width)
    background = random_background(rng, height, width)
    figures, outfits = _sample_figures(rng, K, height, width)
    light, ambient = _sample_light(rng)
    return Scene(K, background, figures, outfits, light, ambient)


def render_sample(seed: int, index: int, height: int = 256, width: int = 192) -> Sample:
    """Render image ``index`` of the dataset with ``seed``; deterministic in (seed, index)."""
    return render_scene(sample_scene(seed, index, height, width))


def render_scene(scene: Scene) -> Sample:
    """Draw a scene with every dense target (deterministic: the scene holds all its randomness)."""
    K, background, figures, outfits, light, ambient = (scene.K, scene.background, scene.figures, scene.outfits,
                                                       scene.light, scene.ambient)
    height, width = background.shape[:2]

    # Visibility: one z-buffer over the primitives of all figures.
    prims = Primitives.concat([f.primitives for f in figures])
    counts = [len(f.primitives) for f in figures]
    first_primitive = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(int)
    primitive_figure = np.repeat(np.arange(len(figures)), counts)
    windows = pixel_windows(prims, K, height, width)
    depth_buffer, ids = rasterize(prims, K, height, width, windows)
    mask = ids >= 0

    # Surface attributes of every covered pixel centre.
    rows, cols = np.nonzero(mask)
    hit_ids = ids[rows, cols]
    dx, dy = ray_directions(K, cols.astype(float), rows.astype(float))
    z = depth_buffer[rows, cols]
    points = np.stack([dx * z, dy * z, z], axis=1)
    surface_normals, local = surface_frames(prims, hit_ids, points)
    albedo, part_labels = paint(build_surface_table(figures, outfits), hit_ids, local, prims.radii[hit_ids], points)
    shading = ambient + (1.0 - ambient) * np.clip(surface_normals @ light, 0.0, None)

    # Matting: soft coverage, un-mixed foreground colour, composite over the background.
    colour = np.zeros((height, width, 3), np.float32)
    colour[rows, cols] = np.clip(albedo * shading[:, None], 0.0, 1.0)
    alpha = coverage_alpha(prims, K, mask, windows)
    _bleed_colours(colour, mask, (alpha > 0) & ~mask)
    alpha3 = cv2.merge([alpha, alpha, alpha])
    image = alpha3 * colour + (1.0 - alpha3) * background

    normals = np.zeros((height, width, 3), np.float32)
    normals[rows, cols] = surface_normals
    depth = np.zeros((height, width), np.float32)
    depth[rows, cols] = z
    labels = np.zeros((height, width), np.uint8)
    labels[rows, cols] = part_labels
    base_colour = np.zeros((height, width, 3), np.float32)
    base_colour[rows, cols] = np.clip(albedo, 0.0, 1.0)
    figure_map = np.full((height, width), -1, np.int16)
    figure_map[rows, cols] = primitive_figure[hit_ids]
    people = [
        Person(keypoints=keypoint_visibility(figure, first, K, depth_buffer, ids), silhouette=figure_map == i)
        for i, (figure, first) in enumerate(zip(figures, first_primitive))
    ]
    return Sample(
        image=np.round(image * 255).astype(np.uint8),
        labels=labels,
        normals=normals,
        mask=mask,
        depth=depth,
        K=K,
        alpha=alpha,
        foreground=np.round(colour * 255).astype(np.uint8),  # zero wherever alpha is
        albedo=np.round(base_colour * 255).astype(np.uint8),
        figure_map=figure_map,
        people=people,
    )
