"""Pictures of inputs, targets and predictions (RGB uint8 HxWx3 numpy arrays) for dashboards and overlays."""

from __future__ import annotations

from typing import Sequence

import cv2
import numpy as np
import torch


def palette(num_classes: int, colours: Sequence | None = None) -> np.ndarray:
    """A fixed colour per class id (0 = black background), well spread in hue; ``colours``: a class set's own
    (RGB, None: the palette's) in place of them."""
    colors = np.zeros((max(num_classes, 1), 3), np.uint8)
    for i in range(1, num_classes):
        hue = int(round(179 * ((i * 0.618034) % 1.0)))
        hsv = np.array([[[hue, 200, 255 if i % 2 else 190]]], np.uint8)
        colors[i] = cv2.cvtColor(hsv, cv2.COLOR_HSV2RGB)[0, 0]
    for i, colour in enumerate(colours or ()):
        if colour is not None:
            colors[i] = colour
    return colors


def label_overlay(image: np.ndarray, labels: np.ndarray, num_classes: int, opacity: float = 0.7,
                  ignore_index: int = 255, colours: Sequence | None = None) -> np.ndarray:
    """Class colours (``palette``) over the image; background (0) and ignored pixels show the image."""
    colors = palette(num_classes, colours)[np.clip(labels, 0, num_classes - 1)]
    shown = (labels > 0) & (labels != ignore_index) & (labels < num_classes)
    out = image.astype(np.float32)
    out[shown] = (1 - opacity) * out[shown] + opacity * colors[shown]
    return out.round().astype(np.uint8)


def normal_rgb(normals: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Unit normals (H, W, 3) in [-1, 1] -> RGB ((n + 1) / 2); masked-out pixels black."""
    rgb = ((np.nan_to_num(normals) + 1) * 127.5).clip(0, 255).astype(np.uint8)
    if mask is not None:
        rgb[~mask.astype(bool)] = 0
    return rgb


def inverse_depth_turbo(depth: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """Inverse depth 1 / Z (H, W) as a turbo colour map (near = red), scaled to the 2-98 percentiles of the shown
    pixels: the depth picture of the Sapiens2 model cards. Pixels at Z <= 0 or outside ``mask`` are black."""
    valid = np.isfinite(depth) & (depth > 0)
    inverse = np.where(valid, 1.0 / np.where(valid, depth, 1.0), np.nan)
    shown = valid & (mask.astype(bool) if mask is not None else True)
    values = inverse[shown]
    low, high = np.percentile(values, [2, 98]) if values.size else (0.0, 1.0)
    scaled = np.clip((np.nan_to_num(inverse, nan=low) - low) / max(high - low, 1e-12), 0, 1)
    rgb = cv2.applyColorMap((255 * scaled).astype(np.uint8), cv2.COLORMAP_TURBO)[..., ::-1].copy()
    rgb[~shown] = 0
    return rgb


def checkerboard(height: int, width: int, cell: int = 16) -> np.ndarray:
    ys, xs = np.mgrid[:height, :width]
    light = ((ys // cell + xs // cell) % 2).astype(bool)
    board = np.full((height, width, 3), 100, np.uint8)
    board[light] = 160
    return board


def matte_composite(foreground: np.ndarray, alpha: np.ndarray) -> np.ndarray:
    """Foreground (H, W, 3 uint8) over a checkerboard with ``alpha`` (H, W) in [0, 1]."""
    a = np.clip(alpha, 0, 1)[..., None]
    board = checkerboard(*alpha.shape)
    return (a * foreground + (1 - a) * board).round().astype(np.uint8)


def gray(values: np.ndarray) -> np.ndarray:
    """(H, W) in [0, 1] -> RGB gray."""
    return np.repeat((np.clip(values, 0, 1) * 255).round().astype(np.uint8)[..., None], 3, axis=2)


CAPTION_HEIGHT = 20
MIN_PANEL_HEIGHT = 384  # smaller pictures (CPU demos at 256x192) are enlarged to be readable


def _text(canvas: np.ndarray, text: str, origin: tuple[int, int], scale: float = 0.45) -> None:
    cv2.putText(canvas, text, origin, cv2.FONT_HERSHEY_SIMPLEX, scale, (235, 235, 235), 1, cv2.LINE_AA)


def enlarge(image: np.ndarray, height: int) -> np.ndarray:
    """Nearest-neighbour enlargement by a whole factor so that the picture is at least ``height`` tall."""
    factor = max(1, -(-height // image.shape[0]))
    return image if factor == 1 else np.repeat(np.repeat(image, factor, axis=0), factor, axis=1)


def side_by_side(images: Sequence[np.ndarray], titles: Sequence[str] = (),
                 min_height: int = MIN_PANEL_HEIGHT) -> np.ndarray:
    """Equal-height RGB images in a row, each under a caption strip with its title (never drawn over the
    picture); small pictures are enlarged by a whole factor to at least ``min_height`` pixels."""
    images = [im if im.ndim == 3 else gray(im / 255.0) for im in images]
    height = max(im.shape[0] for im in images)
    images = [enlarge(im, min_height) if height < min_height else im for im in images]
    height = max(im.shape[0] for im in images)
    tiles = []
    for i, im in enumerate(images):
        tile = np.full((height + CAPTION_HEIGHT, im.shape[1], 3), 32, np.uint8)
        tile[CAPTION_HEIGHT:CAPTION_HEIGHT + im.shape[0]] = im
        if i < len(titles):
            _text(tile, titles[i], (4, 14))
        tiles.append(tile)
    return np.concatenate(tiles, axis=1)


def class_legend(class_names: Sequence[str], class_ids: Sequence[int], width: int, row_height: int = 18,
                 colours: Sequence | None = None) -> np.ndarray:
    """Colour swatches and names of ``class_ids`` (palette of ``label_overlay``), in as many columns as fit
    ``width`` pixels; returns an RGB strip of that width."""
    colors = palette(len(class_names), colours)
    column = 150
    columns = max(1, width // column)
    rows = max(1, -(-len(class_ids) // columns))
    strip = np.full((rows * row_height + 4, width, 3), 32, np.uint8)
    for n, c in enumerate(class_ids):
        x, y = (n % columns) * column + 4, (n // columns) * row_height + 4
        strip[y:y + row_height - 4, x:x + 14] = colors[c] if c > 0 else (0, 0, 0)
        cv2.rectangle(strip, (x, y), (x + 13, y + row_height - 5), (200, 200, 200), 1)
        _text(strip, str(class_names[c])[:18], (x + 19, y + row_height - 6), 0.4)
    return strip


def with_legend(panel: np.ndarray, class_names: Sequence[str], class_ids: Sequence[int],
                colours: Sequence | None = None) -> np.ndarray:
    """``panel`` with the legend of ``class_ids`` below it."""
    return np.concatenate([panel, class_legend(class_names, class_ids, panel.shape[1], colours=colours)], axis=0)


def image_rgb(batch: dict, i: int) -> np.ndarray:
    """Sample ``i``'s uint8 (3, H, W) input image as RGB HxWx3."""
    return batch["image"][i].permute(1, 2, 0).cpu().numpy()


def to_png(x: torch.Tensor, low: float = 0.0, high: float = 1.0) -> np.ndarray:
    """(C, H, W) or (H, W) values in [low, high] -> uint8 HxW[x3] for cv2 (RGB channels become BGR)."""
    x = ((x.detach().float().cpu() - low) / (high - low)).clamp(0, 1).mul(255).round().to(torch.uint8)
    if x.ndim == 3:
        x = x.permute(1, 2, 0)
        x = x[..., [2, 1, 0]] if x.shape[-1] == 3 else x[..., 0]
    return x.numpy()
