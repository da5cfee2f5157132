"""Object Keypoint Similarity (OKS) and greedy OKS-NMS, pure numpy.

Follows the MMPose / COCO definition: per keypoint
``exp(-d^2 / (2 * s^2 * (2 * sigma)^2))`` with ``s^2`` the mean of the two
instances' areas, averaged over keypoints.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

_EPS = np.spacing(1)


def oks_iou(
    g: np.ndarray,
    d: np.ndarray,
    area_g: float,
    area_d: np.ndarray | Sequence[float],
    sigmas: np.ndarray | Sequence[float],
) -> np.ndarray:
    """OKS between one instance ``g`` and each instance in ``d``, over all keypoints (upstream's OKS-NMS counts
    every keypoint, whatever its score).

    Args:
        g: (K, 2) xy, or (K, 3) xy + score (the score is not used).
        d: (M, K, 2) or (M, K, 3), same layout as ``g``.
        area_g: area of ``g``. area_d: (M,) areas of ``d``. The OKS scale is their mean.
        sigmas: (K,) per-keypoint sigmas.

    Returns:
        (M,) float64 OKS values.
    """
    g = np.asarray(g, dtype=np.float64)
    d = np.asarray(d, dtype=np.float64)
    sigmas = np.asarray(sigmas, dtype=np.float64)
    if d.ndim == 2:
        d = d[None]
    if g.ndim != 2 or d.ndim != 3 or d.shape[1:] != g.shape or g.shape[0] != sigmas.shape[0]:
        raise ValueError(
            f"oks_iou: expected g (K, C), d (M, K, C) and K sigmas; got g {g.shape}, d {d.shape}, "
            f"{sigmas.shape[0]} sigmas"
        )
    area_d = np.asarray(area_d, dtype=np.float64).reshape(-1)
    if area_d.shape[0] != d.shape[0]:
        raise ValueError(f"oks_iou: {d.shape[0]} instances but {area_d.shape[0]} areas")
    if d.shape[0] == 0:
        return np.zeros(0, dtype=np.float64)

    variances = (2.0 * sigmas) ** 2
    sq_dist = ((d[..., :2] - g[None, :, :2]) ** 2).sum(-1)  # (M, K)
    scale = (area_g + area_d)[:, None] / 2.0 + _EPS
    e = sq_dist / variances[None] / scale / 2.0
    return np.exp(-e).mean(axis=1)


def keypoint_extent_area(keypoints: np.ndarray) -> np.ndarray:
    """Area of the box spanned by each instance's keypoints, all of them whatever their scores; non-finite
    keypoints are left out (an instance with none finite has area 0).

    keypoints (N, K, 2+) -> (N,) float64: (max x - min x) * (max y - min y).
    """
    xy = np.asarray(keypoints, dtype=np.float64)[..., :2]
    if xy.ndim != 3:
        raise ValueError(f"keypoint_extent_area: expected keypoints (N, K, 2), got {xy.shape}")
    if xy.shape[0] == 0:
        return np.zeros(0, dtype=np.float64)
    finite = np.isfinite(xy).all(-1, keepdims=True)
    span = np.where(finite, xy, -np.inf).max(axis=1) - np.where(finite, xy, np.inf).min(axis=1)
    return np.where(np.isfinite(span).all(-1), span[:, 0] * span[:, 1], 0.0)


def oks_nms(
    keypoints: np.ndarray,
    scores: np.ndarray | Sequence[float],
    areas: np.ndarray | Sequence[float],
    sigmas: np.ndarray | Sequence[float],
    threshold: float,
) -> np.ndarray:
    """Greedy OKS-NMS over the instances of ONE image.

    Repeatedly keeps the highest-scoring remaining instance and drops every
    remaining instance whose OKS with it is above ``threshold``. Ties in score
    keep input order (stable sort).

    Args:
        keypoints: (N, K, 2) or (N, K, 3). scores, areas: (N,).

    Returns:
        int64 indices of kept instances, in descending score order.
    """
    keypoints = np.asarray(keypoints, dtype=np.float64)
    scores = np.asarray(scores, dtype=np.float64).reshape(-1)
    areas = np.asarray(areas, dtype=np.float64).reshape(-1)
    if not (keypoints.shape[0] == scores.shape[0] == areas.shape[0]):
        raise ValueError(
            f"oks_nms: got {keypoints.shape[0]} keypoint sets, {scores.shape[0]} scores, {areas.shape[0]} areas"
        )
    order = np.argsort(-scores, kind="stable")
    keep: list[int] = []
    while order.size > 0:
        i = int(order[0])
        keep.append(i)
        rest = order[1:]
        ovr = oks_iou(keypoints[i], keypoints[rest], areas[i], areas[rest], sigmas)
        order = rest[ovr <= threshold]
    return np.asarray(keep, dtype=np.int64)
