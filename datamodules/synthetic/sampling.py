"""Random-choice helper shared by the samplers."""

import numpy as np


def choose(rng: np.random.Generator, options, probabilities):
    """One of ``options`` drawn with the given probabilities (cheaper than ``rng.choice``)."""
    cumulative = np.cumsum(probabilities)
    return options[int(np.searchsorted(cumulative, rng.random() * cumulative[-1], side="right"))]
