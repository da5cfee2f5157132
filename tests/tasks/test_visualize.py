"""Panel drawing: captions beside the pictures, enlargement of small pictures, the class legend."""

from __future__ import annotations

import numpy as np

from sapiens2_ft.tasks.visualize import CAPTION_HEIGHT, class_legend, enlarge, palette, side_by_side


def test_side_by_side_keeps_the_pictures_untouched_under_caption_strips():
    rng = np.random.default_rng(0)
    a, b = (rng.integers(0, 256, (64, 48, 3), dtype=np.uint8) for _ in range(2))
    panel = side_by_side([a, b], ["ground truth", "prediction"], min_height=128)
    assert panel.shape == (CAPTION_HEIGHT + 128, 2 * 96, 3)
    assert np.array_equal(panel[CAPTION_HEIGHT:, :96], enlarge(a, 128))
    assert np.array_equal(panel[CAPTION_HEIGHT:, 96:], enlarge(b, 128))
    assert np.array_equal(enlarge(a, 128)[::2, ::2], a)  # a whole factor, nearest neighbour
    assert (panel[:CAPTION_HEIGHT, :96] > 200).any() and (panel[:CAPTION_HEIGHT, 96:] > 200).any()


def test_class_legend_shows_a_swatch_of_each_listed_class():
    names = [f"class_{i}" for i in range(29)]
    legend = class_legend(names, [3, 22, 23], width=600)
    colors = palette(29)
    for c in (3, 22, 23):
        assert (legend == colors[c]).all(axis=-1).sum() >= 100  # a 14 x 14 swatch minus its border
    assert not (legend == colors[4]).all(axis=-1).any()
