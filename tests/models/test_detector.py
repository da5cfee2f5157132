"""The person detector: NMS against a brute-force loop, the person class by name, and a tiny random RT-DETR's boxes
against an independent re-derivation of RT-DETR's post-processing (sigmoid scores, top queries, cxcywh -> pixels)."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest
import torch

from sapiens2_ft.models.detector import DetectorError, PersonDetector, batched_nms, box_iou, person_label
from conftest import tiny_detector


def iou_one(a, b) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    union = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h
    return w * h / union


def nms_loop(boxes, scores, groups, threshold) -> list[int]:
    """Greedy NMS, one image at a time, written plainly."""
    kept = []
    for group in sorted(set(groups)):
        members = sorted((i for i in range(len(boxes)) if groups[i] == group), key=lambda i: -scores[i])
        chosen: list[int] = []
        for i in members:
            if all(iou_one(boxes[i], boxes[j]) <= threshold for j in chosen):
                chosen.append(i)
        kept += chosen
    return kept


def random_boxes(rng, n):
    xy = rng.uniform(0, 100, (n, 2))
    return np.concatenate([xy, xy + rng.uniform(5, 60, (n, 2))], axis=1)


def test_box_iou_matches_a_plain_formula():
    rng = np.random.default_rng(0)
    a, b = random_boxes(rng, 7), random_boxes(rng, 5)
    expected = np.array([[iou_one(x, y) for y in b] for x in a])
    assert np.allclose(box_iou(torch.tensor(a), torch.tensor(b)).numpy(), expected)


@pytest.mark.parametrize("threshold", [0.3, 0.6])
def test_batched_nms_equals_per_image_greedy_nms(threshold):
    rng = np.random.default_rng(1)
    boxes, scores, groups = random_boxes(rng, 60), rng.uniform(size=60), rng.integers(0, 4, 60)
    kept = batched_nms(torch.tensor(boxes), torch.tensor(scores), torch.tensor(groups), threshold)
    assert sorted(kept.tolist()) == sorted(nms_loop(boxes, scores, groups, threshold))
    # Identical boxes in two images never suppress each other.
    same = torch.tensor([[0.0, 0, 10, 10], [0.0, 0, 10, 10]])
    assert sorted(batched_nms(same, torch.tensor([0.9, 0.8]), torch.tensor([0, 1]), 0.5).tolist()) == [0, 1]
    assert batched_nms(same, torch.tensor([0.9, 0.8]), torch.tensor([0, 0]), 0.5).tolist() == [0]


def test_person_label_is_found_by_name():
    assert person_label({0: "N/A", 1: "Person", 2: "bicycle"}) == 1
    with pytest.raises(DetectorError, match="no person class"):
        person_label({0: "cat", 1: "dog"})


def resized(model_dir, images) -> torch.Tensor:
    """RT-DETR's preprocessing as its config states it: resize to ``size``, x 1/255, no normalisation."""
    size = json.loads((model_dir / "preprocessor_config.json").read_text())["size"]
    pixels = np.stack([cv2.resize(im, (size["width"], size["height"]), interpolation=cv2.INTER_LINEAR)
                       for im in images]).astype(np.float32) / 255
    return torch.from_numpy(pixels).permute(0, 3, 1, 2)


def rederived(model_dir, pixel_values, images, threshold, nms_iou) -> list[np.ndarray]:
    """RT-DETR's post-processing written from its definition."""
    from transformers import AutoModelForObjectDetection

    model = AutoModelForObjectDetection.from_pretrained(model_dir).eval()
    with torch.no_grad():
        out = model(pixel_values=pixel_values)
    results = []
    for logits, cxcywh, image in zip(out.logits, out.pred_boxes, images):
        num_queries, num_classes = logits.shape
        scores, index = logits.sigmoid().flatten().topk(num_queries)  # the top (query, class) pairs
        labels, queries = index % num_classes, index // num_classes
        h, w = image.shape[:2]
        c = cxcywh[queries]
        xyxy = torch.stack([(c[:, 0] - c[:, 2] / 2) * w, (c[:, 1] - c[:, 3] / 2) * h,
                            (c[:, 0] + c[:, 2] / 2) * w, (c[:, 1] + c[:, 3] / 2) * h], 1)
        xyxy[:, 0::2] = xyxy[:, 0::2].clamp(0, w)
        xyxy[:, 1::2] = xyxy[:, 1::2].clamp(0, h)
        keep = (labels == 0) & (scores > threshold) & (xyxy[:, 2] > xyxy[:, 0]) & (xyxy[:, 3] > xyxy[:, 1])
        boxes, kept_scores = xyxy[keep].numpy(), scores[keep].numpy()
        chosen = nms_loop(boxes, kept_scores, [0] * len(boxes), nms_iou)
        chosen.sort(key=lambda i: -kept_scores[i])
        b = boxes[chosen]
        results.append(np.concatenate([b[:, :2], b[:, 2:] - b[:, :2], kept_scores[chosen, None]], axis=1))
    return results


def test_detector_boxes_equal_the_rederivation(tiny_detector_dir):
    rng = np.random.default_rng(2)
    images = [rng.integers(0, 256, (120, 90, 3), dtype=np.uint8), rng.integers(0, 256, (64, 200, 3), dtype=np.uint8)]
    # Random weights score everything low: a threshold under the scores keeps boxes to compare.
    detector = PersonDetector(str(tiny_detector_dir), threshold=0.005, nms_iou=0.5)
    # The processor (its PIL variant where torchvision is absent) resizes and rescales as its config says:
    # on a smooth image PIL's and cv2's bilinear resizes differ by 0.0004 on average (measured).
    ramp = np.tile(np.linspace(0, 255, 90).astype(np.uint8)[None, :, None], (120, 1, 3))
    ramp[..., 1] = np.linspace(0, 255, 120).astype(np.uint8)[:, None]  # a vertical ramp in green
    smooth = detector.processor(images=[ramp], return_tensors="pt")["pixel_values"]
    assert (smooth - resized(tiny_detector_dir, [ramp])).abs().mean() < 0.004
    pixel_values = detector.processor(images=images, return_tensors="pt")["pixel_values"]
    found, expected = detector(images), rederived(tiny_detector_dir, pixel_values, images, 0.005, 0.5)
    assert [len(f) for f in found] == [len(e) for e in expected] and sum(len(f) for f in found) > 0
    for f, e in zip(found, expected):
        assert np.allclose(f, e, atol=1e-4), (f, e)
        assert (f[:, 2:4] > 0).all()
    assert (found[0][:, 0] + found[0][:, 2] <= 90 + 1e-6).all()  # clipped to the image
    assert detector([]) == []


def test_detector_errors_name_the_flag_and_the_fix(tmp_path):
    with pytest.raises(DetectorError, match=r"--detector DIR") as err:
        PersonDetector("someone/missing-detector")
    assert "hf download someone/missing-detector" in str(err.value)
    with pytest.raises(DetectorError, match="detector: directory"):
        PersonDetector(str(tmp_path / "nowhere"))
    no_person = tiny_detector(tmp_path / "animals", labels=("cat", "dog"))
    with pytest.raises(DetectorError, match="no person class"):
        PersonDetector(str(no_person))
