"""Which unlabelled images are worth a person's time: the ones the model is least sure of, optionally spread out.

``choose`` is ranked batch-mode selection (Cardoso et al., 2017): the first pick is the most unsure image; each next
pick maximises ``(1 - diversity) x unsure / max(unsure) + diversity x (distance to the nearest image already picked)
/ (the largest such distance)``, the distance being between the images' features (pose: the mean layout of its people
in their boxes; seg: the fractions of the people's pixels per class). ``diversity`` 0 is the plain ranking by
unsureness; ties go to the earlier image in name order, so the same inputs give the same list.
"""

from __future__ import annotations

import numpy as np


def choose(unsure: list[float], features: list[np.ndarray] | None, budget: int, diversity: float = 0.0) -> list[int]:
    """The indices of the ``budget`` images to label, in the order they were picked (see the module docstring)."""
    if not 0 <= diversity <= 1:
        raise ValueError(f"diversity: a weight in [0, 1], got {diversity}")
    if budget < 1:
        raise ValueError(f"budget: at least 1 image, got {budget}")
    unsure = np.asarray(unsure, dtype=np.float64)
    budget = min(budget, len(unsure))
    if not budget:
        return []
    top = unsure.max()
    value = unsure / top if top > 0 else np.zeros_like(unsure)
    if diversity == 0 or features is None:
        return [int(i) for i in np.argsort(-value, kind="stable")[:budget]]
    feats = np.stack([np.asarray(f, dtype=np.float64).reshape(-1) for f in features])
    picked = [int(np.argmax(value))]
    nearest = np.linalg.norm(feats - feats[picked[0]], axis=1)
    available = np.ones(len(unsure), bool)
    available[picked[0]] = False
    while len(picked) < budget:
        spread = nearest / nearest.max() if nearest.max() > 0 else np.zeros_like(nearest)
        score = np.where(available, (1 - diversity) * value + diversity * spread, -np.inf)
        k = int(np.argmax(score))
        picked.append(k)
        available[k] = False
        nearest = np.minimum(nearest, np.linalg.norm(feats - feats[k], axis=1))
    return picked
