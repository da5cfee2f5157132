"""Per-keypoint accuracy of COCO keypoint results: which keypoints a low OKS AP comes from.

For each evaluated image, every ground-truth person (``iscrowd`` 0, at least one labelled keypoint) is paired
with at most one prediction of that image, the pairing that maximises the summed OKS (Hungarian assignment,
``scipy.optimize.linear_sum_assignment``); persons left without a prediction count as ``unmatched`` and are left
out. Over the labelled (visibility > 0) keypoints of the matched persons, per keypoint k:

- ``oks``: the mean OKS term exp(-d^2 / (2 s^2 (2 sigma_k)^2)), d the pixel distance between prediction and
  ground truth, s^2 the person's annotated ``area``: the per-keypoint factor that OKS (and pycocotools) averages;
- ``pck``: PCK@``threshold``, the fraction with d < ``threshold`` x max(width, height) of the person's ``bbox``;
- ``visible``: how many keypoints were scored (undefined ``oks`` / ``pck``, NaN, where 0).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pycocotools.coco import COCO
from scipy.optimize import linear_sum_assignment

PCK_THRESHOLD = 0.05


@dataclass
class KeypointAccuracy:
    """Per-keypoint ``oks`` and ``pck`` (K,) (NaN where ``visible`` is 0), ``visible`` (K,) counts, and the
    number of ``matched`` and ``unmatched`` ground-truth persons."""

    oks: np.ndarray
    pck: np.ndarray
    visible: np.ndarray
    matched: int
    unmatched: int

    @classmethod
    def empty(cls, num_keypoints: int) -> "KeypointAccuracy":
        nan = np.full(num_keypoints, np.nan)
        return cls(nan, nan.copy(), np.zeros(num_keypoints, np.int64), 0, 0)


def keypoint_accuracy(coco: COCO, results: list[dict], img_ids: list[int], sigmas: np.ndarray, category_id: int,
                      threshold: float = PCK_THRESHOLD) -> KeypointAccuracy:
    """Per-keypoint OKS term and PCK of ``results`` (COCO keypoint results) against ``coco`` over ``img_ids``."""
    sigmas = np.asarray(sigmas, dtype=np.float64)
    k = sigmas.size
    variances = (2.0 * sigmas) ** 2
    oks_sum, hits, visible = np.zeros(k), np.zeros(k), np.zeros(k, np.int64)
    matched = unmatched = 0
    by_image: dict[int, list[np.ndarray]] = {}
    for r in results:
        by_image.setdefault(int(r["image_id"]), []).append(np.asarray(r["keypoints"], np.float64).reshape(k, 3)[:, :2])
    for img_id in img_ids:
        people = [a for a in coco.loadAnns(coco.getAnnIds(imgIds=[img_id], catIds=[category_id]))
                  if not a.get("iscrowd", 0) and np.any(np.asarray(a.get("keypoints", []), np.float64)[2::3] > 0)]
        if not people:
            continue
        predictions = by_image.get(int(img_id), [])
        if not predictions:
            unmatched += len(people)
            continue
        truth = np.stack([np.asarray(a["keypoints"], np.float64).reshape(k, 3) for a in people])  # (G, K, 3)
        labelled = truth[:, :, 2] > 0
        area = np.array([float(a["area"]) for a in people])
        d2 = ((np.stack(predictions)[None] - truth[:, None, :, :2]) ** 2).sum(-1)  # (G, D, K)
        terms = np.nan_to_num(np.exp(-d2 / variances / (area[:, None, None] + np.spacing(1)) / 2))  # NaN: a miss
        oks = (terms * labelled[:, None]).sum(-1) / labelled.sum(-1)[:, None]  # (G, D)
        rows, cols = linear_sum_assignment(oks, maximize=True)
        for g, d in zip(rows, cols):
            box = people[g].get("bbox")
            if box is None or len(box) != 4:
                raise ValueError(f"annotation {people[g].get('id')} of image {img_id}: no 'bbox' [x, y, w, h] "
                                 f"for the PCK scale")
            v = labelled[g]
            oks_sum[v] += terms[g, d][v]
            hits[v] += np.sqrt(d2[g, d][v]) < threshold * max(float(box[2]), float(box[3]))
            visible += v
        matched += len(rows)
        unmatched += len(people) - len(rows)
    with np.errstate(invalid="ignore", divide="ignore"):
        return KeypointAccuracy(np.where(visible > 0, oks_sum / visible, np.nan),
                                np.where(visible > 0, hits / visible, np.nan), visible, matched, unmatched)
