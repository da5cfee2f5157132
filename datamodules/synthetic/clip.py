"""Rendered clips with known motion (``bench/smoothing.py``): the main figure of a dataset scene, alone, still or
moving sideways at a constant speed, drawn frame by frame by the dataset's renderer (``render_scene``); each frame's
``Sample`` holds the figure's true keypoints."""

from dataclasses import replace

import numpy as np

from .scene import Sample, render_scene, sample_scene


def render_clip(seed: int, frames: int, pixels_per_frame: float = 0.0, height: int = 256,
                width: int = 384) -> list[Sample]:
    """``frames`` images of the main figure of scene ``seed`` (its camera, background and light), centred across the
    frame and moved sideways by ``pixels_per_frame`` (at its depth) each frame, the path centred in the image."""
    scene = sample_scene(seed, 0, height, width)
    figure, K = scene.figures[0], scene.K
    depth = float(np.median(figure.keypoints[:, 2]))
    centre = float(np.mean(K[0, 0] * figure.keypoints[:, 0] / figure.keypoints[:, 2] + K[0, 2]))
    metres_per_pixel = depth / K[0, 0]
    out = []
    for t in range(frames):
        shift = (width - 1) / 2 - centre + pixels_per_frame * (t - (frames - 1) / 2)
        moved = figure.transformed(np.eye(3), np.array([shift * metres_per_pixel, 0.0, 0.0]))
        out.append(render_scene(replace(scene, figures=[moved], outfits=scene.outfits[:1])))
    return out
