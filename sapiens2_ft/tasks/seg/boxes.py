"""Person boxes from a body-part segmentation: one box per connected region of foreground (any class but 0).

People who touch in the image form one region and get one box; a detector separates them.
"""

from __future__ import annotations

import cv2
import numpy as np


def boxes_from_foreground(foreground: np.ndarray, min_area: float = 0.001, pad: float = 0.05,
                          confidence: np.ndarray | None = None) -> np.ndarray:
    """(N, 5) ``[x, y, w, h, score]`` boxes of the 8-connected regions of a (H, W) bool mask, largest first.

    Args:
        foreground: The people's pixels.
        min_area: Regions smaller than this fraction of the image are dropped (specks of noise).
        pad: Each box grows by this fraction of its width and height on every side, clipped to the image.
        confidence: Optional (H, W) per-pixel foreground probability; a box's score is its mean over the
            region (1.0 without it).
    """
    if foreground.ndim != 2:
        raise ValueError(f"foreground must be (H, W), got shape {foreground.shape}")
    height, width = foreground.shape
    count, labels, stats, _ = cv2.connectedComponentsWithStats(foreground.astype(np.uint8), connectivity=8)
    boxes = []
    for region in range(1, count):  # 0 is the background
        x, y, w, h, area = (int(v) for v in stats[region])
        if area < min_area * height * width:
            continue
        x0, y0 = max(0.0, x - pad * w), max(0.0, y - pad * h)
        x1, y1 = min(float(width), x + w + pad * w), min(float(height), y + h + pad * h)
        score = 1.0 if confidence is None else float(confidence[labels == region].mean())
        boxes.append([x0, y0, x1 - x0, y1 - y0, score, area])
    boxes.sort(key=lambda b: -b[5])
    return np.asarray([b[:5] for b in boxes], dtype=np.float64).reshape(-1, 5)
