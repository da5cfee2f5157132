"""Person boxes from a body-part segmentation: one box per connected region of foreground (any class but 0).

People who touch in the image form one region. Where the seg model also says where heads are (the classes of
``datamodules.body_parts.HEAD_PARTS``), a region holding two or more heads is split between them, each pixel
going to its nearest head; people whose heads touch stay one region, and a detector separates them.
"""

from __future__ import annotations

import cv2
import numpy as np


def head_blobs(heads: np.ndarray, min_area: float) -> tuple[int, np.ndarray]:
    """(count, labels) of the 8-connected blobs of a (H, W) bool head mask at least ``min_area`` of the image;
    labels are 1..count, 0 elsewhere."""
    count, labels, stats, _ = cv2.connectedComponentsWithStats(heads.astype(np.uint8), connectivity=8)
    keep = np.zeros(count, np.int32)
    big = [i for i in range(1, count) if stats[i, cv2.CC_STAT_AREA] >= min_area * heads.size]
    keep[big] = np.arange(1, len(big) + 1)
    return len(big), keep[labels]


def split_by_heads(region: np.ndarray, blobs: np.ndarray) -> list[np.ndarray]:
    """The (H, W) bool masks of ``region`` split between the head blobs (labels > 0) inside it, each pixel to
    the nearest blob (cv2's 5x5 approximation of the Euclidean distance); the region itself when it holds fewer than two."""
    inside = np.unique(blobs[region])
    inside = inside[inside > 0]
    if len(inside) < 2:
        return [region]
    ys, xs = np.nonzero(region)
    y0, x0, y1, x1 = ys.min(), xs.min(), ys.max() + 1, xs.max() + 1
    crop = blobs[y0:y1, x0:x1] * region[y0:y1, x0:x1]
    # Each pixel's nearest zero of ``src`` (a head pixel), as that pixel's label; a lookup from the labels of
    # the head pixels themselves to their blobs then gives every pixel its nearest blob.
    src = (crop == 0).astype(np.uint8)
    _, nearest = cv2.distanceTransformWithLabels(src, cv2.DIST_L2, 5, labelType=cv2.DIST_LABEL_PIXEL)
    on_head = crop > 0
    lookup = np.zeros(int(nearest.max()) + 1, np.int32)
    lookup[nearest[on_head]] = crop[on_head]
    owner = lookup[nearest]
    parts = []
    for blob in inside:
        part = np.zeros_like(region)
        part[y0:y1, x0:x1] = region[y0:y1, x0:x1] & (owner == blob)
        parts.append(part)
    return parts


def boxes_from_foreground(foreground: np.ndarray, min_area: float = 0.001, pad: float = 0.05,
                          confidence: np.ndarray | None = None, heads: np.ndarray | None = None,
                          head_area: float = 0.002) -> np.ndarray:
    """(N, 5) ``[x, y, w, h, score]`` boxes of the 8-connected regions of a (H, W) bool mask, largest first.

    Args:
        foreground: The people's pixels.
        min_area: Regions (and parts of a split region) smaller than this fraction of the image are dropped
            (specks of noise).
        pad: Each box grows by this fraction of its width and height on every side, clipped to the image.
        confidence: Optional (H, W) per-pixel foreground probability; a box's score is its mean over the
            region (1.0 without it).
        heads: Optional (H, W) bool mask of head pixels: a region holding two or more head blobs of at least
            ``head_area`` of the image is split between them (``split_by_heads``).
        head_area: The smallest head blob that counts, as a fraction of the image.
    """
    if foreground.ndim != 2:
        raise ValueError(f"foreground must be (H, W), got shape {foreground.shape}")
    if heads is not None and heads.shape != foreground.shape:
        raise ValueError(f"heads must have the foreground's shape {foreground.shape}, got {heads.shape}")
    height, width = foreground.shape
    count, labels, stats, _ = cv2.connectedComponentsWithStats(foreground.astype(np.uint8), connectivity=8)
    blobs = head_blobs(heads & foreground, head_area)[1] if heads is not None else None
    boxes = []
    for region in range(1, count):  # 0 is the background
        if stats[region, cv2.CC_STAT_AREA] < min_area * height * width:
            continue
        mask = labels == region
        for part in (split_by_heads(mask, blobs) if blobs is not None else [mask]):
            area = int(part.sum())
            if area < min_area * height * width:
                continue
            ys, xs = np.nonzero(part)
            x, y, w, h = int(xs.min()), int(ys.min()), int(xs.max() - xs.min() + 1), int(ys.max() - ys.min() + 1)
            x0, y0 = max(0.0, x - pad * w), max(0.0, y - pad * h)
            x1, y1 = min(float(width), x + w + pad * w), min(float(height), y + h + pad * h)
            score = 1.0 if confidence is None else float(confidence[part].mean())
            boxes.append([x0, y0, x1 - x0, y1 - y0, score, area])
    boxes.sort(key=lambda b: -b[5])
    return np.asarray([b[:5] for b in boxes], dtype=np.float64).reshape(-1, 5)
