"""Random backgrounds: gradients, an optional floor, low-frequency noise and simple shapes."""

import cv2
import numpy as np

from .appearance import random_colour


def _gradient(rng, height, width):
    """Linear two-colour gradient in a random direction, HxWx3 float32."""
    angle = rng.uniform(0, 2 * np.pi)
    ramp_x = np.arange(width, dtype=np.float32)[None, :] * float(np.cos(angle) / width)
    ramp_y = np.arange(height, dtype=np.float32)[:, None] * float(np.sin(angle) / height)
    low, high = float(ramp_x.min() + ramp_y.min()), float(ramp_x.max() + ramp_y.max())
    ramp = (ramp_x + ramp_y - low) * (1.0 / max(high - low, 1e-6))
    start, end = random_colour(rng), random_colour(rng)
    return cv2.merge([s + ramp * (e - s) for s, e in zip(start, end)])


def _shapes(rng, canvas):
    """Draw a few filled or outlined shapes onto a uint8 RGB canvas (in place)."""
    height, width = canvas.shape[:2]
    for _ in range(int(rng.integers(0, 9))):
        colour = tuple(int(255 * c) for c in random_colour(rng))
        kind = rng.integers(4)
        thickness = -1 if rng.random() < 0.6 else int(rng.integers(1, 5))
        p1 = (int(rng.integers(-width // 4, width)), int(rng.integers(-height // 4, height)))
        if kind == 0:
            p2 = (p1[0] + int(rng.integers(5, width)), p1[1] + int(rng.integers(5, height)))
            cv2.rectangle(canvas, p1, p2, colour, thickness, cv2.LINE_AA)
        elif kind == 1:
            cv2.circle(canvas, p1, int(rng.integers(3, max(height, width) // 3)), colour, thickness, cv2.LINE_AA)
        elif kind == 2:
            p2 = (int(rng.integers(0, width)), int(rng.integers(0, height)))
            cv2.line(canvas, p1, p2, colour, int(rng.integers(1, 8)), cv2.LINE_AA)
        else:
            points = rng.integers([0, 0], [width, height], size=(int(rng.integers(3, 6)), 2)).astype(np.int32)
            cv2.fillPoly(canvas, [points], colour, cv2.LINE_AA)


def random_background(rng: np.random.Generator, height: int, width: int) -> np.ndarray:
    """HxWx3 float32 RGB background in [0,1]."""
    image = _gradient(rng, height, width)
    if rng.random() < 0.5:  # floor below a horizon line
        horizon = int(rng.uniform(0.3, 0.85) * height)
        image[horizon:] = _gradient(rng, height - horizon, width)
    if rng.random() < 0.7:  # blotchy low-frequency noise
        grid = rng.uniform(-1, 1, size=(int(rng.integers(2, 9)), int(rng.integers(2, 9)), 3)).astype(np.float32)
        image += float(rng.uniform(0.05, 0.25)) * cv2.resize(grid, (width, height), interpolation=cv2.INTER_CUBIC)
    canvas = (np.clip(image, 0, 1) * 255).astype(np.uint8)
    _shapes(rng, canvas)
    image = canvas.astype(np.float32) * (1 / 255)
    if rng.random() < 0.5:  # out-of-focus background
        image = cv2.GaussianBlur(image, (0, 0), rng.uniform(0.5, 2.5))
    grain = float(rng.uniform(0.0, 0.03)) * rng.standard_normal(size=(height, width), dtype=np.float32)
    image += cv2.merge([grain, grain, grain])
    return np.clip(image, 0.0, 1.0)
