"""Tests for CocoKeypointAP and OKS-NMS on tiny synthetic COCO files."""

from __future__ import annotations

import contextlib
import io
import json
import warnings
from pathlib import Path

import numpy as np
import pytest
import torch
from forked import start_ranks
from pycocotools.coco import COCO
from pycocotools.cocoeval import COCOeval

from sapiens2_ft.tasks.pose.metric import CocoKeypointAP
from sapiens2_ft.tasks.pose.oks_nms import oks_iou, oks_nms

SIGMAS = [0.026, 0.025, 0.025, 0.035, 0.035, 0.079, 0.079, 0.072, 0.072,
          0.062, 0.062, 0.107, 0.107, 0.087, 0.087, 0.089, 0.089]  # fmt: skip
K = len(SIGMAS)
KEYS = ("AP", "AP50", "AP75", "APM", "APL", "AR", "AR50", "AR75", "ARM", "ARL")


# ----------------------------------------------------------------- fixtures
def _make_coco(path: Path, num_images: int = 5, seed: int = 0) -> dict:
    """Write a tiny COCO keypoint file: 2-3 people per image, medium and large areas."""
    rng = np.random.default_rng(seed)
    images, anns = [], []
    for img_id in range(1, num_images + 1):
        images.append({"id": img_id * 10, "file_name": f"{img_id:06d}.jpg", "width": 1000, "height": 800})
        for p in range(int(rng.integers(2, 4))):
            w, h = (50.0, 100.0) if p % 2 == 0 else (150.0, 300.0)  # area 5000 (medium) / 45000 (large)
            x0, y0 = 20.0 + 320.0 * p, 40.0 + 300.0 * rng.random()
            xy = np.stack([x0 + w * rng.random(K), y0 + h * rng.random(K)], axis=1)
            vis = rng.choice([0, 1, 2], size=K, p=[0.15, 0.15, 0.7])
            xy[vis == 0] = 0.0
            kps = np.concatenate([xy, vis[:, None]], axis=1)
            anns.append({
                "id": len(anns) + 1, "image_id": img_id * 10, "category_id": 1, "iscrowd": 0,
                "bbox": [x0, y0, w, h], "area": w * h * 0.8,
                "num_keypoints": int((vis > 0).sum()), "keypoints": kps.reshape(-1).tolist(),
            })  # fmt: skip
    cats = [{"id": 1, "name": "person", "supercategory": "person",
             "keypoints": [f"kp{i}" for i in range(K)], "skeleton": []}]  # fmt: skip
    path.write_text(json.dumps({"images": images, "annotations": anns, "categories": cats}))
    return {"anns": anns, "image_ids": [im["id"] for im in images]}


@pytest.fixture(scope="module")
def coco_file(tmp_path_factory) -> tuple[Path, dict]:
    path = tmp_path_factory.mktemp("coco") / "person_keypoints_tiny.json"
    return path, _make_coco(path)


def _gt_predictions(anns: list[dict]) -> dict[str, np.ndarray]:
    """Ground-truth keypoints as predictions (all scores 1)."""
    kps = np.array([a["keypoints"] for a in anns], dtype=np.float64).reshape(-1, K, 3)
    return {
        "image_ids": np.array([a["image_id"] for a in anns], dtype=np.int64),
        "keypoints": kps[..., :2].copy(),
        "keypoint_scores": np.ones((len(anns), K)),
        "box_scores": np.ones(len(anns)),
        "areas": np.array([a["bbox"][2] * a["bbox"][3] for a in anns]),
    }


def _perturbed_predictions(anns: list[dict], seed: int = 1) -> dict[str, np.ndarray]:
    """Noisy keypoints, random scores, ~25% instances dropped, a few spurious ones added."""
    rng = np.random.default_rng(seed)
    p = _gt_predictions(anns)
    n = len(p["image_ids"])
    scale = np.sqrt(p["areas"])[:, None, None]
    p["keypoints"] = p["keypoints"] + rng.normal(0.0, 0.04, size=(n, K, 2)) * scale
    p["keypoint_scores"] = rng.random((n, K))
    p["box_scores"] = rng.uniform(0.5, 1.0, n)
    keep = rng.random(n) > 0.25
    keep[:2] = True
    p = {k: v[keep] for k, v in p.items()}
    m = 3  # spurious detections on existing images, far from everyone
    spurious = {
        "image_ids": p["image_ids"][:m],
        "keypoints": np.full((m, K, 2), 900.0) + rng.normal(0, 5, (m, K, 2)),
        "keypoint_scores": rng.random((m, K)),
        "box_scores": rng.uniform(0.5, 1.0, m),
        "areas": np.full(m, 4000.0),
    }
    return {k: np.concatenate([p[k], spurious[k]]) for k in p}


def _update(metric: CocoKeypointAP, preds: dict[str, np.ndarray], idx=None) -> None:
    sel = slice(None) if idx is None else idx
    metric.update(**{k: torch.as_tensor(v[sel]) for k, v in preds.items()})


def _pycoco_stats(ann_file: Path, results: list[dict]) -> np.ndarray:
    """pycocotools called directly on a result list, on the images that have results."""
    with contextlib.redirect_stdout(io.StringIO()):
        gt = COCO(str(ann_file))
        dt = gt.loadRes([dict(r) for r in results])
        ev = COCOeval(gt, dt, "keypoints")
        ev.params.kpt_oks_sigmas = np.array(SIGMAS)
        ev.params.imgIds = sorted({r["image_id"] for r in results})
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return np.array(ev.stats)


def _as_array(out: dict[str, torch.Tensor]) -> np.ndarray:
    return np.array([float(out[k]) for k in KEYS])


# ------------------------------------------------------------------- OKS/NMS
def test_oks_iou_formula():
    g = np.random.default_rng(0).random((K, 2)) * 100
    d = np.stack([g, g + 3.0])
    ious = oks_iou(g, d, 4000.0, [4000.0, 6000.0], SIGMAS)
    var = (2 * np.array(SIGMAS)) ** 2
    expected = np.exp(-18.0 / var / (5000.0 + np.spacing(1)) / 2).mean()
    assert ious[0] == pytest.approx(1.0)
    assert ious[1] == pytest.approx(expected, rel=1e-12)
    # A score column (K, 3) plays no part in the distance.
    rng = np.random.default_rng(1)
    scored = oks_iou(np.c_[g, rng.random(K)], np.concatenate([d, rng.random((2, K, 1)) * 50], -1), 4000.0,
                     [4000.0, 6000.0], SIGMAS)
    np.testing.assert_allclose(scored, ious, rtol=1e-12)
    with pytest.raises(ValueError, match="oks_iou: expected"):  # one keypoint more in d only
        oks_iou(g, np.concatenate([d, d[:, :1]], 1), 4000.0, [4000.0, 6000.0], SIGMAS)


def test_oks_nms_suppresses_duplicate_keeps_distinct():
    rng = np.random.default_rng(0)
    a = rng.random((K, 2)) * 100
    b = a + 400.0  # a different person
    kpts = np.stack([a + 0.5, b, a])  # index 0: near-duplicate of 2 with lower score
    keep = oks_nms(kpts, [0.5, 0.7, 0.9], [5000.0] * 3, SIGMAS, 0.9)
    assert keep.tolist() == [2, 1]


# -------------------------------------------------------------------- metric
def test_gt_as_predictions_gives_ap_one(coco_file):
    ann_file, gt = coco_file
    metric = CocoKeypointAP(ann_file, SIGMAS)
    _update(metric, _gt_predictions(gt["anns"]), slice(0, 4))
    _update(metric, _gt_predictions(gt["anns"]), slice(4, None))
    with contextlib.redirect_stdout(io.StringIO()) as out:
        res = metric.compute()
    assert out.getvalue() == ""  # pycocotools is kept quiet
    assert "Average Precision" in metric.summary_text
    assert set(res) == set(KEYS)
    for key in ("AP", "AP50", "AP75", "APM", "APL", "AR"):
        assert float(res[key]) == pytest.approx(1.0), key
    assert len(metric.results) == len(gt["anns"])  # distinct people survive OKS-NMS
    r = metric.results[0]
    assert set(r) == {"image_id", "category_id", "keypoints", "score"} and len(r["keypoints"]) == 3 * K


def test_only_images_with_predictions_are_evaluated(coco_file):
    ann_file, gt = coco_file
    subset = [a for a in gt["anns"] if a["image_id"] in gt["image_ids"][:2]]
    metric = CocoKeypointAP(ann_file, SIGMAS)
    _update(metric, _gt_predictions(subset))
    assert float(metric.compute()["AP"]) == pytest.approx(1.0)
    assert {r["image_id"] for r in metric.results} == set(gt["image_ids"][:2])


def test_perturbed_matches_pycocotools(coco_file):
    ann_file, gt = coco_file
    preds = _perturbed_predictions(gt["anns"])
    for use_nms in (True, False):
        metric = CocoKeypointAP(ann_file, SIGMAS, use_oks_nms=use_nms)
        _update(metric, preds)
        stats = _as_array(metric.compute())
        assert 0.0 < stats[0] < 1.0
        np.testing.assert_allclose(stats, _pycoco_stats(ann_file, metric.results), rtol=0, atol=1e-9)
        assert len(metric.results) == len(preds["image_ids"])  # no distinct person suppressed

    # Independent rescoring of the raw inputs, no NMS.
    results = []
    for i in range(len(preds["image_ids"])):
        ks = preds["keypoint_scores"][i]
        valid = [s for s in ks if s > 0.2]
        score = preds["box_scores"][i] * (sum(valid) / len(valid) if valid else 0.0)
        kps = np.concatenate([preds["keypoints"][i], ks[:, None]], axis=1).reshape(-1).tolist()
        results.append({"image_id": int(preds["image_ids"][i]), "category_id": 1, "keypoints": kps, "score": score})
    np.testing.assert_allclose(stats, _pycoco_stats(ann_file, results), rtol=0, atol=1e-9)


def test_oks_nms_in_metric(coco_file):
    ann_file, gt = coco_file
    preds = _gt_predictions(gt["anns"])
    preds["box_scores"] = np.linspace(0.6, 1.0, len(preds["box_scores"]))
    dup = {k: v[:1].copy() for k, v in preds.items()}
    dup["keypoints"] += 0.5
    dup["box_scores"] *= 0.5
    both = {k: np.concatenate([preds[k], dup[k]]) for k in preds}

    with_nms = CocoKeypointAP(ann_file, SIGMAS)
    _update(with_nms, both)
    with_nms.compute()
    assert len(with_nms.results) == len(gt["anns"])
    assert min(r["score"] for r in with_nms.results) >= 0.6 - 1e-12  # the duplicate went

    no_nms = CocoKeypointAP(ann_file, SIGMAS, use_oks_nms=False)
    _update(no_nms, both)
    no_nms.compute()
    assert len(no_nms.results) == len(gt["anns"]) + 1


def test_exact_duplicates_dropped_and_order_invariant(coco_file):
    ann_file, gt = coco_file
    preds = _perturbed_predictions(gt["anns"])
    n = len(preds["image_ids"])
    ref = CocoKeypointAP(ann_file, SIGMAS, use_oks_nms=False)
    _update(ref, preds)
    perm = np.random.default_rng(3).permutation(n)
    padded = np.concatenate([perm, perm[:3]])  # DistributedSampler-style repeats
    other = CocoKeypointAP(ann_file, SIGMAS, use_oks_nms=False)
    _update(other, preds, padded)
    np.testing.assert_array_equal(_as_array(ref.compute()), _as_array(other.compute()))
    assert ref.results == other.results


def test_wrong_keypoint_count_names_file(coco_file):
    ann_file, gt = coco_file
    preds = _gt_predictions(gt["anns"])
    metric = CocoKeypointAP(ann_file, SIGMAS)
    with pytest.raises(ValueError, match=ann_file.name):
        metric.update(
            torch.as_tensor(preds["image_ids"]), torch.zeros(len(preds["image_ids"]), 13, 2),
            torch.ones(len(preds["image_ids"]), 13), torch.ones(len(preds["image_ids"])),
            torch.as_tensor(preds["areas"]),
        )  # fmt: skip

    n = len(preds["image_ids"])
    with pytest.raises(ValueError, match=r"\(scores: 13\)"):  # the scores alone of another count
        metric.update(torch.as_tensor(preds["image_ids"]), torch.zeros(n, K, 2), torch.ones(n, 13), torch.ones(n),
                      torch.as_tensor(preds["areas"]))

    metric13 = CocoKeypointAP(ann_file, SIGMAS[:13])
    n = len(preds["image_ids"])
    metric13.update(torch.as_tensor(preds["image_ids"]), torch.zeros(n, 13, 2), torch.ones(n, 13),
                    torch.ones(n), torch.as_tensor(preds["areas"]))  # fmt: skip
    with pytest.raises(ValueError, match=rf"{ann_file.name}.*17 keypoints"):
        metric13.compute()


def test_unknown_image_ids(coco_file):
    ann_file, gt = coco_file
    preds = _gt_predictions(gt["anns"][:2])
    preds["image_ids"] = np.array([999, 12345])
    metric = CocoKeypointAP(ann_file, SIGMAS)
    _update(metric, preds)
    with pytest.raises(ValueError, match=r"not in the annotation file.*999, 12345"):
        metric.compute()


@pytest.mark.filterwarnings("ignore:The ``compute`` method")
def test_empty_gives_zeros_with_warning_and_reset(coco_file):
    ann_file, gt = coco_file
    metric = CocoKeypointAP(ann_file, SIGMAS)
    with pytest.warns(UserWarning, match="no predictions"):
        res = metric.compute()
    assert all(float(res[k]) == 0.0 for k in KEYS) and metric.results == []

    _update(metric, _gt_predictions(gt["anns"]))
    assert float(metric.compute()["AP"]) == pytest.approx(1.0) and metric.results
    metric.reset()
    assert metric.results == [] and metric.summary_text == "" and metric.image_ids == []
    with pytest.warns(UserWarning, match="no predictions"):
        assert float(metric.compute()["AP"]) == 0.0


def test_before_sync_shapes_only_empty_states(coco_file):
    """The placeholders a rank without predictions gathers are (0, K, 2) and (0, K); a rank's data stays."""
    ann_file, gt = coco_file
    empty = CocoKeypointAP(ann_file, SIGMAS)
    empty.before_sync()
    assert [tuple(empty.keypoints[0].shape), tuple(empty.keypoint_scores[0].shape)] == [(0, K, 2), (0, K)]
    full = CocoKeypointAP(ann_file, SIGMAS)
    _update(full, _gt_predictions(gt["anns"]), slice(0, 3))
    full.before_sync()
    assert [len(full.keypoints), tuple(full.keypoints[0].shape)] == [1, (3, K, 2)]


# --------------------------------------------------------------- distributed
def _ddp_worker(rank: int, world_size: int, ann_file: str, preds: dict, out_dir: str) -> None:
    import torch.distributed as dist

    warnings.simplefilter("ignore")  # a file rendezvous: no TCP port another test could take first
    dist.init_process_group("gloo", init_method=f"file://{out_dir}/rendezvous", rank=rank, world_size=world_size)
    try:
        n = len(preds["image_ids"])
        half = np.arange(n)[rank::world_size]
        out = {}
        for use_nms in (True, False):
            metric = CocoKeypointAP(ann_file, SIGMAS, use_oks_nms=use_nms)
            if rank == 0:  # two batches here, one (plus a padding repeat of rank 0's row) on rank 1
                _update(metric, preds, half[: len(half) // 2])
                _update(metric, preds, half[len(half) // 2 :])
            else:
                _update(metric, preds, np.concatenate([half, [0]]))
            out[f"split_nms{use_nms}"] = _as_array(metric.compute()).tolist()
            out[f"n_results_nms{use_nms}"] = len(metric.results)
            out[f"local_batches_nms{use_nms}"] = len(metric.image_ids)  # local state restored after sync

        one_empty = CocoKeypointAP(ann_file, SIGMAS)
        if rank == 0:
            _update(one_empty, preds)
        out["one_empty"] = _as_array(one_empty.compute()).tolist()

        all_empty = CocoKeypointAP(ann_file, SIGMAS)
        out["all_empty"] = _as_array(all_empty.compute()).tolist()
        Path(out_dir, f"rank{rank}.json").write_text(json.dumps(out))
    finally:
        dist.destroy_process_group()


@pytest.mark.distributed
def test_distributed_gather_matches_single_process(coco_file, tmp_path):
    ann_file, gt = coco_file
    preds = _perturbed_predictions(gt["anns"])
    expected = {}
    for use_nms in (True, False):
        metric = CocoKeypointAP(ann_file, SIGMAS, use_oks_nms=use_nms)
        _update(metric, preds)
        expected[use_nms] = _as_array(metric.compute())

    start_ranks(_ddp_worker, (2, str(ann_file), preds, str(tmp_path)), nprocs=2)
    for rank in range(2):
        out = json.loads((tmp_path / f"rank{rank}.json").read_text())
        for use_nms in (True, False):
            np.testing.assert_allclose(out[f"split_nms{use_nms}"], expected[use_nms], rtol=0, atol=1e-12)
            assert out[f"n_results_nms{use_nms}"] == len(preds["image_ids"])
        assert out["local_batches_nmsTrue"] == (2 if rank == 0 else 1)
        np.testing.assert_allclose(out["one_empty"], expected[True], rtol=0, atol=1e-12)
        assert out["all_empty"] == [0.0] * len(KEYS)


# ------------------------------------------------------- NMS area and groups
def _extent_area_loop(points) -> float:
    """Width x height of the box around one instance's keypoints, written out plainly."""
    xs = [float(p[0]) for p in points]
    ys = [float(p[1]) for p in points]
    return (max(xs) - min(xs)) * (max(ys) - min(ys))


def _oks_loop(a, b, area_a, area_b, sigmas) -> float:
    total = 0.0
    for (xa, ya), (xb, yb), s in zip(a, b, sigmas):
        total += np.exp(-((xa - xb) ** 2 + (ya - yb) ** 2) / (2 * (area_a + area_b) / 2 * (2 * s) ** 2))
    return total / len(sigmas)


def test_keypoint_extent_area_matches_loop():
    from sapiens2_ft.tasks.pose.oks_nms import keypoint_extent_area

    kpts = np.random.default_rng(0).random((4, K, 2)) * [300, 200]
    np.testing.assert_allclose(keypoint_extent_area(kpts), [_extent_area_loop(p) for p in kpts], rtol=1e-12)
    assert keypoint_extent_area(np.zeros((0, K, 2))).shape == (0,)
    kpts[1, 3] = np.nan  # a missed keypoint (the metric's MISSED) is left out, not the person
    kpts[2] = np.nan
    areas = keypoint_extent_area(kpts)
    assert areas[1] == pytest.approx(_extent_area_loop(np.delete(kpts[1], 3, axis=0)), rel=1e-12) and areas[2] == 0


def test_oks_nms_scale_is_the_keypoint_extent_by_default(coco_file):
    """Upstream (keypoints308_evaluator.py) scales OKS-NMS by the predicted keypoints' extent, not the box."""
    ann_file, gt = coco_file
    rng = np.random.default_rng(5)
    a = 100.0 + rng.random((K, 2)) * 30.0  # a person 30 px across ...
    b = a + 3.0  # ... and a near copy, in a box of 45000 px^2
    preds = {"image_ids": np.array([gt["image_ids"][0]] * 2), "keypoints": np.stack([a, b]),
             "keypoint_scores": np.ones((2, K)), "box_scores": np.array([0.9, 0.5]), "areas": np.full(2, 45000.0)}
    by_extent = _oks_loop(a, b, _extent_area_loop(a), _extent_area_loop(b), SIGMAS)
    by_box = _oks_loop(a, b, 45000.0, 45000.0, SIGMAS)
    assert by_extent <= 0.9 < by_box  # the two rules disagree on this pair
    default = CocoKeypointAP(ann_file, SIGMAS)
    _update(default, preds)
    default.compute()
    assert len(default.results) == 2  # OKS by extent <= 0.9: both kept
    box = CocoKeypointAP(ann_file, SIGMAS, nms_area="box")
    _update(box, preds)
    box.compute()
    assert len(box.results) == 1 and box.results[0]["score"] == pytest.approx(0.9)
    with pytest.raises(ValueError, match="nms_area"):
        CocoKeypointAP(ann_file, SIGMAS, nms_area="bbox")


GROUPS = {"head": [0, 1, 2, 3, 4], "legs": [11, 12, 13, 14, 15, 16]}


def _group_stats_by_hand(ann_file: Path, results: list[dict], ids: list[int]) -> float:
    """AP of one group: ground truth and results sliced to the group in plain loops, then pycocotools."""
    data = json.loads(ann_file.read_text())
    for ann in data["annotations"]:
        triplets = [ann["keypoints"][3 * i: 3 * i + 3] for i in ids]
        ann["keypoints"] = [v for t in triplets for v in t]
        ann["num_keypoints"] = sum(1 for t in triplets if t[2] > 0)
    data["categories"][0]["keypoints"] = [data["categories"][0]["keypoints"][i] for i in ids]
    sliced = []
    for r in results:
        sliced.append({**r, "keypoints": [v for i in ids for v in r["keypoints"][3 * i: 3 * i + 3]]})
    with contextlib.redirect_stdout(io.StringIO()):
        coco = COCO()
        coco.dataset = data
        coco.createIndex()
        ev = COCOeval(coco, coco.loadRes(sliced), "keypoints")
        ev.params.kpt_oks_sigmas = np.array([SIGMAS[i] for i in ids])
        ev.params.imgIds = sorted({r["image_id"] for r in results})
        ev.evaluate()
        ev.accumulate()
        ev.summarize()
    return float(ev.stats[0])


def test_group_ap_oracle_and_wrong_group(coco_file):
    ann_file, gt = coco_file
    oracle = CocoKeypointAP(ann_file, SIGMAS, groups=GROUPS)
    _update(oracle, _gt_predictions(gt["anns"]))
    res = oracle.compute()
    assert set(res) == set(KEYS) | {"AP_head", "AP_legs"}
    assert float(res["AP_head"]) == pytest.approx(1.0) and float(res["AP_legs"]) == pytest.approx(1.0)

    preds = _gt_predictions(gt["anns"])
    preds["keypoints"][:, GROUPS["legs"]] += 60.0  # legs far off, the head exact
    wrong = CocoKeypointAP(ann_file, SIGMAS, groups=GROUPS)
    _update(wrong, preds)
    res = wrong.compute()
    assert float(res["AP_head"]) == pytest.approx(1.0)
    assert float(res["AP_legs"]) < 0.05
    assert float(res["AP"]) < 1.0


def test_group_ap_leaves_out_people_without_labelled_group_keypoints(tmp_path):
    """A person none of whose head keypoints is labelled (v = 0) is no head ground truth; one whose head keypoints
    are labelled but hidden (v = 1) is."""
    ann_file = tmp_path / "groups.json"
    gt = _make_coco(ann_file, seed=3)
    data = json.loads(ann_file.read_text())
    for ann, visibility in zip(data["annotations"][:2], (0, 1)):  # the two people _perturbed_predictions keeps
        for i in GROUPS["head"]:
            x, y = ann["keypoints"][3 * i: 3 * i + 2]
            ann["keypoints"][3 * i: 3 * i + 3] = [0.0, 0.0, 0] if visibility == 0 else [x, y, 1]
    ann_file.write_text(json.dumps(data))
    metric = CocoKeypointAP(ann_file, SIGMAS, groups=GROUPS)
    _update(metric, _perturbed_predictions(gt["anns"]))
    res = metric.compute()
    expected = _group_stats_by_hand(ann_file, metric.results, GROUPS["head"])
    assert float(res["AP_head"]) == pytest.approx(expected, abs=1e-12)


def test_group_ap_matches_slicing_by_hand(coco_file):
    ann_file, gt = coco_file
    metric = CocoKeypointAP(ann_file, SIGMAS, groups=GROUPS)
    _update(metric, _perturbed_predictions(gt["anns"]))
    res = metric.compute()
    for name, ids in GROUPS.items():
        expected = _group_stats_by_hand(ann_file, metric.results, ids)
        assert 0.0 < expected < 1.0
        assert float(res[f"AP_{name}"]) == pytest.approx(expected, abs=1e-12), name
    assert float(res["AP"]) == pytest.approx(_pycoco_stats(ann_file, metric.results)[0], abs=1e-12)


@pytest.mark.filterwarnings("ignore:The ``compute`` method")
def test_group_errors_and_empty(coco_file):
    ann_file, _ = coco_file
    with pytest.raises(ValueError, match="group 'tail'"):
        CocoKeypointAP(ann_file, SIGMAS, groups={"tail": [16, 17]})
    with pytest.raises(ValueError, match="group 'none'"):
        CocoKeypointAP(ann_file, SIGMAS, groups={"none": []})
    empty = CocoKeypointAP(ann_file, SIGMAS, groups=GROUPS)
    with pytest.warns(UserWarning, match="no predictions"):
        res = empty.compute()
    assert float(res["AP_head"]) == 0.0 and float(res["AP_legs"]) == 0.0


def test_non_finite_keypoints_count_as_misses(coco_file):
    """pycocotools matches a NaN OKS at every threshold; a NaN keypoint must score as one placed far away (OKS-NMS
    off: a far keypoint would also widen the instance's extent area, which NMS uses and a NaN one does not)."""
    ann_file, info = coco_file
    preds = _gt_predictions(info["anns"])
    visible = np.array([a["keypoints"] for a in info["anns"]]).reshape(-1, K, 3)[..., 2] > 0
    person = int(np.argmax(visible.sum(1)))  # a person with labelled keypoints
    joint = int(np.flatnonzero(visible[person])[0])

    def ap_with(value: float) -> dict:
        p = {k: v.copy() for k, v in preds.items()}
        p["keypoints"][person, joint] = value
        metric = CocoKeypointAP(ann_file, SIGMAS, use_oks_nms=False)
        _update(metric, p)
        return {k: float(v) for k, v in metric.compute().items()}

    with pytest.warns(UserWarning, match="1 of .* predictions have non-finite keypoints"):
        nan = ap_with(float("nan"))
    far = ap_with(-1e7)
    assert nan == pytest.approx(far) and nan["AP"] < 1.0
