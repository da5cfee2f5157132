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


def two_people_side_by_side() -> tuple[np.ndarray, np.ndarray]:
    """Two figures whose bodies touch (one region) and whose heads do not: (foreground, heads), 100 x 100."""
    foreground, heads = np.zeros((100, 100), bool), np.zeros((100, 100), bool)
    for left in (10, 40):
        foreground[30:90, left:left + 30] = True  # bodies: columns 10-39 and 40-69 touch
        heads[12:30, left + 8:left + 22] = True  # heads 18 x 14, 16 columns apart
    return foreground | heads, heads


def nearest_head_split(foreground: np.ndarray, heads: np.ndarray) -> tuple[list[list[int]], list[int]]:
    """The split re-derived by brute force, each pixel to the head blob at the least exact Euclidean distance:
    each part's ``[x, y, w, h]`` and pixel count, in head order."""
    from scipy import ndimage

    blobs, count = ndimage.label(heads, structure=np.ones((3, 3)))
    ys, xs = np.nonzero(foreground)
    pixels = np.stack([ys, xs], 1)
    distance = np.stack([np.linalg.norm(pixels[:, None] - np.argwhere(blobs == b)[None], axis=2).min(1)
                         for b in range(1, count + 1)])
    owner = distance.argmin(0)
    boxes = [[int(xs[owner == b].min()), int(ys[owner == b].min()), int(np.ptp(xs[owner == b])) + 1,
              int(np.ptp(ys[owner == b])) + 1] for b in range(count)]
    return boxes, [int((owner == b).sum()) for b in range(count)]


def test_a_region_holding_two_heads_is_split_between_them_nearest_head_first():
    foreground, heads = two_people_side_by_side()
    confidence = np.where(np.arange(100)[None] < 40, 0.9, 0.5) * foreground
    assert len(boxes_from_foreground(foreground, min_area=0.0, pad=0.0)) == 1  # one region without the heads
    boxes = boxes_from_foreground(foreground, min_area=0.0, pad=0.0, confidence=confidence, heads=heads)
    assert len(boxes) == 2
    expected = sorted(nearest_head_split(foreground, heads)[0])
    assert expected == [[10, 12, 30, 78], [40, 12, 30, 78]]
    # cv2's distance transform approximates the Euclidean one: the split line may move by a pixel.
    assert sorted(boxes[:, :4].tolist()) == [pytest.approx(e, abs=1.0) for e in expected]
    left, right = sorted(boxes.tolist())
    assert left[4] == pytest.approx(0.9, abs=0.02) and right[4] == pytest.approx(0.5, abs=0.02)


def test_one_head_small_heads_and_touching_heads_keep_the_region_whole():
    foreground, heads = two_people_side_by_side()
    one_head = heads.copy()
    one_head[:, 40:] = False
    assert len(boxes_from_foreground(foreground, min_area=0.0, pad=0.0, heads=one_head)) == 1
    # Each head is 18 x 14 = 252 pixels, 0.0252 of the image: at 0.02 they count, at 0.03 they do not.
    assert len(boxes_from_foreground(foreground, min_area=0.0, pad=0.0, heads=heads, head_area=0.02)) == 2
    assert len(boxes_from_foreground(foreground, min_area=0.0, pad=0.0, heads=heads, head_area=0.03)) == 1
    joined = heads.copy()
    joined[20:24, 30:50] = True  # the two heads touch: one blob
    assert len(boxes_from_foreground(foreground | joined, min_area=0.0, pad=0.0, heads=joined)) == 1
    with pytest.raises(ValueError, match="heads must have the foreground's shape"):
        boxes_from_foreground(foreground, heads=heads[:50])


def test_a_split_part_under_min_area_is_dropped_and_the_rest_kept():
    foreground, heads = two_people_side_by_side()
    foreground[30:90, 40:70] = False  # the right figure is a head joined to the left body by a bridge
    foreground[26:34, 35:50] = True
    (_, right_area) = nearest_head_split(foreground, heads)[1]
    assert len(boxes_from_foreground(foreground, min_area=0.0, pad=0.0)) == 1  # one region
    assert len(boxes_from_foreground(foreground, min_area=0.0, pad=0.0, heads=heads)) == 2
    (left,) = boxes_from_foreground(foreground, min_area=(right_area + 20) / 1e4, pad=0.0, heads=heads)
    assert left[:4] == pytest.approx([10, 12, 30, 78], abs=1.0)  # the left person, without the right one
