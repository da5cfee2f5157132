"""Person boxes from a segmentation's foreground: one per connected region, with padding, clipping and scores."""

from __future__ import annotations

import numpy as np
import pytest

from sapiens2_ft.tasks.seg.boxes import boxes_from_foreground


def test_one_box_per_region_largest_first_padded_and_clipped():
    mask = np.zeros((100, 80), bool)
    mask[10:30, 5:15] = True  # 20 x 10 region
    mask[40:100, 50:80] = True  # 60 x 30 region touching the bottom-right corner
    mask[2, 70] = True  # a one-pixel speck
    boxes = boxes_from_foreground(mask, min_area=0.001, pad=0.1)
    assert boxes.shape == (2, 5)
    big, small = boxes
    # pad 0.1 of 30 x 60 on every side, clipped at the image's right and bottom edges
    assert big[:4] == pytest.approx([47.0, 34.0, 33.0, 66.0])
    assert small[:4] == pytest.approx([4.0, 8.0, 12.0, 24.0])
    assert (boxes[:, 4] == 1.0).all()
    assert len(boxes_from_foreground(mask, min_area=0.0, pad=0.0)) == 3  # the speck counts without a minimum


def test_diagonal_pixels_join_and_scores_are_the_region_mean():
    mask = np.zeros((10, 10), bool)
    mask[2, 2] = mask[3, 3] = True  # 8-connected: one region
    confidence = np.zeros((10, 10))
    confidence[2, 2], confidence[3, 3] = 0.9, 0.5
    (box,) = boxes_from_foreground(mask, min_area=0.0, pad=0.0, confidence=confidence)
    assert box == pytest.approx([2.0, 2.0, 2.0, 2.0, 0.7])
    assert boxes_from_foreground(np.zeros((10, 10), bool)).shape == (0, 5)
    with pytest.raises(ValueError, match=r"\(H, W\)"):
        boxes_from_foreground(np.zeros((1, 10, 10), bool))
