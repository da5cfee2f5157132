"""Validation diagnostics: per-keypoint OKS / PCK, the seg confusion matrix, dense error histograms, and the
files and dashboard entries a run gets from them."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import numpy as np
import pytest
import torch

from sapiens2_ft.tasks.diagnostics import Bins
from sapiens2_ft.tasks.matting.metric import MattingMetrics
from sapiens2_ft.tasks.normal.metric import NormalMetrics
from sapiens2_ft.tasks.pointmap.metric import PointmapMetrics
from sapiens2_ft.tasks.pose.metric import CocoKeypointAP
from sapiens2_ft.tasks.seg.metric import SegmentationMetrics
from sapiens2_ft.training.callbacks.diagnostics import markdown, write_diagnostics

SIGMAS = [0.05, 0.1, 0.08]
NAMES = ["head", "hand", "foot"]


def _person(ann_id, image_id, box, area, keypoints, iscrowd=0):
    return {"id": ann_id, "image_id": image_id, "category_id": 1, "bbox": box, "area": area, "iscrowd": iscrowd,
            "keypoints": [float(v) for kp in keypoints for v in kp], "num_keypoints": sum(v > 0 for *_, v in keypoints)}


@pytest.fixture
def hand_coco(tmp_path) -> Path:
    """Image 1: persons A and B, a crowd region C; image 2: persons D and E (E gets no prediction)."""
    people = [
        _person(1, 1, [0, 0, 100, 200], 10000.0, [(10, 10, 2), (50, 50, 2), (90, 190, 0)]),  # A, foot unlabelled
        _person(2, 1, [200, 0, 50, 100], 4000.0, [(210, 10, 2), (220, 50, 1), (240, 90, 2)]),  # B
        _person(3, 1, [300, 0, 80, 80], 6400.0, [(310, 10, 2), (320, 20, 2), (330, 30, 2)], iscrowd=1),  # C
        _person(4, 2, [0, 0, 120, 60], 5000.0, [(20, 20, 2), (60, 30, 2), (100, 50, 2)]),  # D
        _person(5, 2, [400, 300, 60, 120], 6000.0, [(420, 320, 2), (440, 360, 2), (450, 410, 2)]),  # E
    ]
    path = tmp_path / "hand.json"
    path.write_text(json.dumps({
        "images": [{"id": i, "file_name": f"{i}.jpg", "width": 640, "height": 480} for i in (1, 2)],
        "annotations": people,
        "categories": [{"id": 1, "name": "person", "keypoints": NAMES, "skeleton": []}]}))
    return path


# The predictions (x, y) and the person each was made for.
PREDICTIONS = {
    "A": (1, [(13, 14), (62, 59), (0, 0)]),  # errors 5 and 15 px; the unlabelled foot is not scored
    "B": (1, [(210, 11), (223, 55), (250, 90)]),  # errors 1, 5.8, 10 px
    "D": (2, [(20, 23), (60, 30), (100, 43)]),  # errors 3, 0, 7 px
}
TRUTH = {  # box scale max(w, h), area, keypoints (x, y, v)
    "A": (200, 10000.0, [(10, 10, 2), (50, 50, 2), (90, 190, 0)]),
    "B": (100, 4000.0, [(210, 10, 2), (220, 50, 1), (240, 90, 2)]),
    "D": (120, 5000.0, [(20, 20, 2), (60, 30, 2), (100, 50, 2)]),
}


def test_per_keypoint_oks_and_pck_match_a_hand_derivation(hand_coco):
    # The predictions go in the reverse order with the lowest score first: the pairing must not depend on it.
    order = ["D", "B", "A"]
    metric = CocoKeypointAP(hand_coco, SIGMAS, use_oks_nms=False, keypoint_names=NAMES)
    metric.update(torch.tensor([PREDICTIONS[p][0] for p in order]),
                  torch.tensor([PREDICTIONS[p][1] for p in order], dtype=torch.float64),
                  torch.full((3, 3), 0.9), torch.tensor([0.2, 0.5, 0.9]), torch.ones(3))
    metric.compute()

    oks_sum, hits, counted = [0.0] * 3, [0] * 3, [0] * 3  # re-derived from the formulas, pair by pair
    for person, (scale, area, truth) in TRUTH.items():
        for k, ((x, y, v), (px, py)) in enumerate(zip(truth, PREDICTIONS[person][1])):
            if v == 0:
                continue
            d2 = (px - x) ** 2 + (py - y) ** 2
            oks_sum[k] += math.exp(-d2 / (2 * area * (2 * SIGMAS[k]) ** 2))
            hits[k] += math.sqrt(d2) < 0.05 * scale
            counted[k] += 1
    acc = metric.keypoint_accuracy
    assert acc.visible.tolist() == counted == [3, 3, 2]
    np.testing.assert_allclose(acc.oks, [s / n for s, n in zip(oks_sum, counted)], rtol=1e-12)
    # PCK thresholds 10, 5, 6 px (A, B, D). head: 5, 1, 3 hit; hand: 15, 5.8 miss, 0 hits; foot: 10, 7 miss
    assert acc.pck.tolist() == [1.0, 1 / 3, 0.0] == [h / n for h, n in zip(hits, counted)]
    assert (acc.matched, acc.unmatched) == (3, 1)  # E has no prediction; the crowd region is not a person

    diagnostics = metric.diagnostics()
    table = diagnostics.tables["keypoints"]
    assert table.columns == ["keypoint_id", "keypoint", "visible", "oks", "pck"]
    assert [row[:3] for row in table.rows] == [[0, "head", 3], [1, "hand", 3], [2, "foot", 2]]
    np.testing.assert_allclose([row[3] for row in table.rows], acc.oks)
    picture = diagnostics.images["keypoints"]
    assert picture.dtype == np.uint8 and picture.ndim == 3 and picture.std() > 0

    metric.reset()  # nothing seen: undefined cells, not zeros
    assert np.isnan(metric.keypoint_accuracy.oks).all() and metric.diagnostics().tables["keypoints"].rows[0][3] is None


def test_a_non_finite_keypoint_is_a_miss(hand_coco):
    metric = CocoKeypointAP(hand_coco, SIGMAS, use_oks_nms=False)
    keypoints = torch.tensor([PREDICTIONS["D"][1]], dtype=torch.float64)
    keypoints[0, 0] = float("nan")
    metric.update(torch.tensor([2]), keypoints, torch.full((1, 3), 0.9), torch.ones(1), torch.ones(1))
    metric.compute()
    acc = metric.keypoint_accuracy
    assert acc.oks[0] == 0.0 and acc.pck[0] == 0.0 and acc.pck[1] == 1.0 and (acc.matched, acc.unmatched) == (1, 1)
    assert [row[1] for row in metric.diagnostics().tables["keypoints"].rows] == NAMES  # the file's names


def test_confusion_matrix_and_per_class_iou_match_numpy():
    rng = np.random.default_rng(0)
    c, names = 4, ["background", "arm", "leg", "head"]
    target = rng.integers(0, c, size=(3, 20, 16))
    target[rng.random(target.shape) < 0.1] = 255  # ignored
    pred = np.where(rng.random(target.shape) < 0.6, np.clip(target, 0, c - 1), rng.integers(0, c, target.shape))
    pred[:, :, :2] = 1  # a column always predicted as class 1
    metric = SegmentationMetrics(c, class_names=names)
    for i in range(3):  # batches of one image
        metric.update(torch.from_numpy(pred[i:i + 1]), torch.from_numpy(target[i:i + 1]))
    metric.compute()
    diagnostics = metric.diagnostics()

    valid = target != 255
    expected = np.bincount(target[valid] * c + pred[valid], minlength=c * c).reshape(c, c)
    counts = diagnostics.tables["confusion"]
    assert counts.columns == ["ground_truth", *names]
    assert [row[0] for row in counts.rows] == names
    np.testing.assert_array_equal([row[1:] for row in counts.rows], expected)
    tp = np.diag(expected)
    per_class = diagnostics.tables["per_class"]
    np.testing.assert_allclose([row[2] for row in per_class.rows],
                               tp / (expected.sum(0) + expected.sum(1) - tp), rtol=1e-12)
    np.testing.assert_allclose([row[3] for row in per_class.rows], tp / expected.sum(1), rtol=1e-12)
    assert [row[4] for row in per_class.rows] == expected.sum(1).tolist()
    assert [row[5] for row in per_class.rows] == expected.sum(0).tolist()
    picture = diagnostics.images["confusion"]
    assert picture.dtype == np.uint8 and picture.shape[2] == 3 and picture.std() > 0


def _counts(table) -> np.ndarray:
    return np.array([row[2] for row in table.rows])


def test_bins_follow_numpy_histogram_and_keep_the_overflow():
    bins = Bins(2.0, 200)
    values = np.array([0.0, 0.01, 0.015, 0.5, 1.99, 2.0, 3.5, 100.0])
    expected, edges = np.histogram(np.clip(values, 0, 2.0), bins=200, range=(0.0, 2.0))
    np.testing.assert_array_equal(bins.edges(), edges)
    np.testing.assert_array_equal(bins.counts(torch.from_numpy(values)).numpy(), expected)


def _unit(x: np.ndarray) -> np.ndarray:
    return x / np.linalg.norm(x, axis=1, keepdims=True)


def test_error_histograms_match_numpy_histogram_across_shards():
    rng = np.random.default_rng(1)
    b, h, w = 4, 12, 10
    mask = rng.random((b, h, w)) > 0.2

    # normals: angle in degrees, 1-degree bins
    pred, target = rng.normal(size=(b, 3, h, w)), rng.normal(size=(b, 3, h, w))
    cos = np.clip((_unit(pred) * _unit(target)).sum(1), -1, 1)
    angles = np.degrees(np.arccos(cos))[mask]
    # pointmap: L2 in metres (a third of the errors beyond the 2 m of the last bin)
    xyz, xyz_true = rng.normal(0, 1.0, (b, 3, h, w)), rng.normal(0, 1.0, (b, 3, h, w))
    l2 = np.linalg.norm(xyz - xyz_true, axis=1)[mask]
    # matting: |alpha error| over all pixels
    alpha, alpha_true = rng.random((b, 1, h, w)), rng.random((b, 1, h, w))

    cases = [(NormalMetrics, (pred, target, mask), "angle_error", np.histogram(angles, bins=np.arange(181.0))[0]),
             (PointmapMetrics, (xyz, xyz_true, mask), "l2_error",
              np.histogram(np.clip(l2, 0, 2.0), bins=200, range=(0.0, 2.0))[0]),
             (MattingMetrics, (alpha, alpha_true, None), "alpha_error",
              np.histogram(np.abs(alpha - alpha_true), bins=100, range=(0.0, 1.0))[0])]
    assert (l2 > 2.0).mean() > 0.2
    for metric_class, arrays, name, expected in cases:
        shards = [metric_class(), metric_class()]  # two processes, each with half of the images
        for shard, part in zip(shards, (slice(0, 1), slice(1, b))):
            shard.update(*(None if a is None else torch.from_numpy(a[part]) for a in arrays))
        shards[0].merge_state(shards[1])  # the states' own reductions (the sum of a process group's sync)
        shards[0].compute()
        diagnostics = shards[0].diagnostics()
        np.testing.assert_array_equal(_counts(diagnostics.tables[name]), expected, err_msg=name)
        fractions = [row[3] for row in diagnostics.tables[name].rows]
        assert diagnostics.tables[name].rows[-1][4] == pytest.approx(1.0) and sum(fractions) == pytest.approx(1.0)
        assert diagnostics.images[name].ndim == 3 and diagnostics.images[name].std() > 0


def test_files_are_csv_and_png(tmp_path):
    metric = SegmentationMetrics(2, class_names=["bg", "person"])
    metric.update(torch.tensor([[[0, 1], [1, 1]]]), torch.tensor([[[0, 0], [1, 255]]]))
    metric.compute()
    diagnostics = metric.diagnostics()
    files = write_diagnostics(tmp_path / "step_3", diagnostics)
    assert sorted(p.name for p in files) == ["confusion.csv", "confusion.png", "per_class.csv"]
    with open(tmp_path / "step_3" / "per_class.csv") as f:
        rows = list(csv.reader(f))
    assert rows[0] == ["class_id", "class", "iou", "accuracy", "gt_pixels", "predicted_pixels"]
    assert rows[1:] == [["0", "bg", "0.5", "0.5", "2", "1"], ["1", "person", "0.5", "1.0", "1", "2"]]
    assert markdown(diagnostics.tables["per_class"]).splitlines()[2] == "| 0 | bg | 0.5 | 0.5 | 2 | 1 |"


def test_the_callback_writes_rank_zero_files_and_tensorboard_entries(tmp_path):
    from types import SimpleNamespace

    from lightning.pytorch.loggers import TensorBoardLogger
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from sapiens2_ft.training.callbacks.diagnostics import ValidationDiagnostics

    metric = MattingMetrics()
    metric.update(torch.rand(1, 1, 8, 8), torch.rand(1, 1, 8, 8))
    metric.compute()
    module = SimpleNamespace(validation_diagnostics=metric.diagnostics)
    logger = TensorBoardLogger(tmp_path, name="tb", version="")
    callback = ValidationDiagnostics(tmp_path)
    for rank_zero, sanity, step in ((False, False, 3), (True, True, 0), (True, False, 7)):
        trainer = SimpleNamespace(sanity_checking=sanity, is_global_zero=rank_zero, global_step=step, loggers=[logger])
        callback.on_validation_end(trainer, module)
    assert [p.name for p in (tmp_path / "diagnostics").iterdir()] == ["step_7"]
    logger.experiment.flush()
    events = EventAccumulator(str(tmp_path / "tb"), size_guidance={"images": 0, "tensors": 0}).Reload()
    assert events.Tags()["images"] == ["diagnostics/alpha_error_chart"]
    assert "diagnostics/alpha_error/text_summary" in events.Tags()["tensors"]


@pytest.mark.slow  # a training run: the fast tier keeps this file's unit tests
def test_a_short_run_writes_and_logs_the_diagnostics(tiny_coco, tiny_pose308_dir, tmp_path):
    from conftest import pose_run_args

    from sapiens2_ft.training.cli import main

    run_dir = tmp_path / "run"
    main(pose_run_args(tiny_coco, tiny_pose308_dir, run_dir, 2, "--export", "false"))
    step = run_dir / "diagnostics" / "step_2"  # the one validation (the sanity check writes none)
    assert sorted(p.name for p in (run_dir / "diagnostics").iterdir()) == ["step_2"]
    assert sorted(p.name for p in step.iterdir()) == ["keypoints.csv", "keypoints.png"]
    with open(step / "keypoints.csv") as f:
        rows = list(csv.DictReader(f))
    assert [r["keypoint"] for r in rows[:3]] == ["nose", "left_eye", "right_eye"] and len(rows) == 17
    assert all(int(r["visible"]) == 4 for r in rows)  # 2 val images x 2 people, every keypoint labelled
    assert all(0.0 <= float(r["oks"]) <= 1.0 and 0.0 <= float(r["pck"]) <= 1.0 for r in rows)
    media = next((run_dir / "wandb").glob("offline-run-*")) / "files" / "media"
    assert len(list((media / "table" / "diagnostics").glob("keypoints_*.table.json"))) == 1
    assert len(list((media / "images" / "diagnostics").glob("keypoints_chart_*.png"))) == 1
