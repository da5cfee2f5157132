"""Pose targets and augmentation against upstream Sapiens2 (REFERENCE §7 "Pose").

Each test retypes the upstream rule plainly (a per-sample loop, from
``pose/src/datasets/transforms/pose_transforms.py``, ``pose/src/datasets/pose_base_dataset.py``,
``engine/datasets/transforms/common_transforms.py`` and the keypoints308 train pipeline) and compares
it with ours on the same inputs, or checks that our draws follow upstream's distributions.
"""

from __future__ import annotations

import json
import warnings
from dataclasses import replace

import albumentations as A
import cv2
import numpy as np
import pytest
import torch
from conftest import write_coco
from scipy import stats

from datamodules.coco_keypoints import PoseInstance, clip_box, load_instances
from datamodules.keypoints.metainfo import load_metainfo
from datamodules.pose_dataset import TopdownPoseDataset
from datamodules.transforms import affine
from datamodules.transforms.photometric import (
    PhotometricDistortion,
    colour_pipeline,
    degrade_pipeline,
    pose_photometric_pipeline,
)
from datamodules.transforms.topdown import TopdownAugment, half_body_box, random_box
from sapiens2_ft.tasks.pose.codec import encode_heatmaps, input_to_heatmap_coords

INPUT = (256, 192)  # (H, W)
META = load_metainfo("coco17")
STILL = TopdownAugment(flip_prob=0.0, half_body_prob=0.0, shift_prob=0.0, scale_prob=0.0, rotate_prob=0.0,
                       photometric_prob=0.0, blur_prob=0.0, median_blur_prob=0.0, dropout_prob=0.0)


# -- 1. keypoints outside the crop ----------------------------------------------------------------------

def upstream_crop_visibility(crop_keypoints, visible, input_size):
    """PoseTopdownAffine: a keypoint with x < 0, x >= w, y < 0 or y >= h after the warp becomes invisible;
    the codec's weight is that visibility (PosePackInputs multiplies by the same bound again)."""
    h, w = input_size
    out = []
    for (x, y), v in zip(crop_keypoints, visible):
        outside = x < 0 or x >= w or y < 0 or y >= h
        out.append(0.0 if outside else float(min(1.0, v)))
    return np.array(out)


def _write_image(path, size=(240, 320)):
    rng = np.random.default_rng(7)
    cv2.imwrite(str(path), rng.integers(0, 255, (*size, 3), dtype=np.uint8))
    return str(path)


def test_keypoints_just_outside_the_crop_get_weight_zero(tmp_path):
    h, w = INPUT
    bbox = (100.0, 40.0, 90.0, 160.0)
    center, scale = affine.box_to_center_scale(bbox, w / h, 1.25)
    matrix = affine.crop_matrix(center, scale, 0.0, INPUT)
    eps = 1e-2
    wanted = np.array([[-eps, 50], [eps, 50], [w - 1, 50], [w - eps, 50], [w + eps, 50],  # along x
                       [50, -eps], [50, eps], [50, h - eps], [50, h + eps],  # along y
                       [-3, -3], [w + 2, h + 2]] + [[40 + i, 60 + i] for i in range(6)], dtype=np.float64)
    image_points = affine.transform_points(wanted, affine.invert(matrix)).astype(np.float32)
    inst = PoseInstance(_write_image(tmp_path / "a.png"), 1, 1, bbox, image_points, np.full(17, 2, np.float32))
    sample = TopdownPoseDataset([inst], META, INPUT)[0]
    keypoints, weights = sample["keypoints"].double().numpy(), sample["keypoint_weights"].numpy()
    np.testing.assert_allclose(keypoints, wanted, atol=1e-3)
    expected = upstream_crop_visibility(keypoints, inst.visibility, INPUT)
    np.testing.assert_array_equal(weights, expected)
    assert weights[:11].tolist() == [0, 1, 1, 1, 0, 0, 1, 1, 0, 0, 0] and (weights[11:] == 1).all()
    # The loss path: those keypoints render no target and keep weight 0.
    coords = input_to_heatmap_coords(sample["keypoints"], INPUT, (64, 48))
    targets, target_weights = encode_heatmaps(coords, sample["keypoint_weights"], (64, 48), sigma=2.0)
    np.testing.assert_array_equal(target_weights.numpy(), expected)
    assert (targets[torch.from_numpy(expected) == 0].amax(dim=(-2, -1)) == 0).all()


def test_augmented_weights_follow_the_crop_bound(tiny_coco):
    instances, _ = load_instances(tiny_coco / "annotations/person_keypoints_train2017.json",
                                  tiny_coco / "train2017", META)
    dataset = TopdownPoseDataset(instances, META, INPUT, TopdownAugment())
    outside_seen = 0
    for seed in range(12):
        for index in range(len(instances)):
            sample = dataset[(index, seed)]
            inst = instances[index]
            forward = affine.invert(sample["inverse_affine"].double().numpy())
            crop = affine.transform_points(inst.keypoints.astype(np.float64), forward)
            expected = upstream_crop_visibility(crop, inst.visibility, INPUT)  # before the flip's reordering
            weights = sample["keypoint_weights"].numpy()
            assert weights.sum() == expected.sum()
            inside = affine.inside_crop(sample["keypoints"].double().numpy(), INPUT)
            assert (weights[~inside] == 0).all() and (weights[inside] == 1).all()
            outside_seen += int((inst.visibility > 0).sum() - expected.sum())
    assert outside_seen > 20  # the augmentation does push keypoints out of the crop


# -- 2. photometric distortion, blur, dropout -----------------------------------------------------------

def upstream_photometric(bgr, beta, contrast_first, alpha, saturation, hue):
    """PhotoMetricDistortion.transform with its random draws given (None = that step's coin said no)."""
    def convert(img, a=1.0, b=0.0):
        return np.clip(img.astype(np.float32) * a + b, 0, 255).astype(np.uint8)

    img = bgr.copy()
    if beta is not None:
        img = convert(img, b=beta)
    if contrast_first and alpha is not None:
        img = convert(img, a=alpha)
    if saturation is not None:
        hsv = cv2.cvtColor(img, cv2.COLOR_BGR2HSV)
        hsv[:, :, 1] = convert(hsv[:, :, 1], a=saturation)
        img = cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR)
    if hue is not None:
        hsv = cv2.cvtColor(img, cv2.COLOR_BGR2HSV)
        hsv[:, :, 0] = (hsv[:, :, 0].astype(int) + hue) % 180
        img = cv2.cvtColor(hsv, cv2.COLOR_HSV2BGR)
    if not contrast_first and alpha is not None:
        img = convert(img, a=alpha)
    return img


def test_photometric_distortion_matches_upstream_pixel_for_pixel():
    rng = np.random.default_rng(0)
    ours = PhotometricDistortion(p=1.0)
    for _ in range(60):
        rgb = rng.integers(0, 256, (24, 20, 3), dtype=np.uint8)
        params = {"beta": rng.uniform(-32, 32) if rng.random() < 0.7 else None,
                  "contrast_first": bool(rng.random() < 0.5),
                  "alpha": rng.uniform(0.5, 1.5) if rng.random() < 0.7 else None,
                  "saturation": rng.uniform(0.5, 1.5) if rng.random() < 0.7 else None,
                  "hue": int(rng.integers(-18, 19)) if rng.random() < 0.7 else None}
        expected = upstream_photometric(rgb[..., ::-1].copy(), **params)[..., ::-1]
        np.testing.assert_array_equal(ours.apply(rgb.copy(), **params), expected)
    # Saturation is multiplicative: grey pixels (S = 0) stay grey at any factor (an additive shift tints them).
    grey = np.repeat(rng.integers(0, 256, (8, 8, 1), dtype=np.uint8), 3, axis=2)
    np.testing.assert_array_equal(ours.apply(grey.copy(), saturation=1.5), grey)


def test_photometric_draws_follow_upstream_ranges():
    ours = PhotometricDistortion(p=1.0)
    ours.set_random_seed(0)
    draws = [ours.get_params() for _ in range(8000)]
    for key in ("beta", "alpha", "saturation", "hue"):
        assert abs(np.mean([d[key] is not None for d in draws]) - 0.5) < 0.02, key  # each step: a fair coin
    assert abs(np.mean([d["contrast_first"] for d in draws]) - 0.5) < 0.02
    betas = [d["beta"] for d in draws if d["beta"] is not None]
    assert stats.kstest(betas, "uniform", args=(-32, 64)).pvalue > 1e-3
    for key in ("alpha", "saturation"):
        values = [d[key] for d in draws if d[key] is not None]
        assert stats.kstest(values, "uniform", args=(0.5, 1.0)).pvalue > 1e-3, key
    hues = [d["hue"] for d in draws if d["hue"] is not None]
    assert set(hues) == set(range(-18, 19))  # randint: both ends included


def test_pose_pipeline_probabilities_are_upstream_and_independent():
    pipeline = TopdownPoseDataset([], META, (64, 48), TopdownAugment()).photometric
    pipeline.save_applied_params = True
    image = np.random.default_rng(1).integers(0, 256, (64, 48, 3), dtype=np.uint8)
    counts, both, holes = {}, 0, []
    n = 3000
    for seed in range(n):
        pipeline.set_random_seed(seed)
        applied = pipeline(image=image)["applied_transforms"]
        names = [name for name, _ in applied]
        for name in names:
            counts[name] = counts.get(name, 0) + 1
        both += "Blur" in names and "MedianBlur" in names
        holes.append(dict(applied)["CoarseDropout"]["holes"])
    assert abs(counts["PhotometricDistortion"] / n - 0.8) < 0.03
    assert abs(counts["Blur"] / n - 0.1) < 0.02 and abs(counts["MedianBlur"] / n - 0.1) < 0.02
    assert abs(both / n - 0.01) < 0.007  # independent coins (a plain Compose.set_random_seed ties them)
    assert counts["CoarseDropout"] == n
    # albumentations 2.x defaults, what upstream's 1.x-style arguments actually ran: 1-2 holes of 10-20%.
    assert {len(h) for h in holes} == {1, 2}
    sizes = np.concatenate(holes)
    heights, widths = sizes[:, 3] - sizes[:, 1], sizes[:, 2] - sizes[:, 0]
    assert heights.min() >= int(0.1 * 64) and heights.max() <= int(0.2 * 64) + 1
    assert widths.min() >= int(0.1 * 48) and widths.max() <= int(0.2 * 48) + 1


def test_every_pipeline_takes_its_arguments_without_an_albumentations_warning():
    from datamodules.dense.transforms import DenseTransform

    image = np.random.default_rng(2).integers(0, 256, (64, 48, 3), dtype=np.uint8)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning, match="not valid for transform CoarseDropout"):
            A.CoarseDropout(max_holes=1, max_height=0.4, min_holes=1, p=1.0)  # upstream's 1.x-style arguments
        pipelines = [TopdownPoseDataset([], META, (64, 48), TopdownAugment()).photometric,
                     pose_photometric_pipeline(), colour_pipeline(0.5), degrade_pipeline(0.1, 0.5),
                     colour_pipeline(1.0, ("foreground",)), degrade_pipeline(1.0, 1.0),
                     *DenseTransform((64, 48), {"pipeline": "generic"}).photometric]
        for pipeline in pipelines:
            if pipeline is not None:
                for seed in range(5):
                    pipeline.set_random_seed(seed)
                    assert pipeline(image=image)["image"].shape == image.shape


# -- 3. half-body, box jitter, clipping, interpolation ---------------------------------------------------

def upstream_half_body(keypoints, visible, upper_ids, lower_ids, prefer_upper, min_total=9, min_upper=2,
                       min_lower=3, padding=1.5):
    """PoseRandomHalfBody for one instance whose probability coin said yes."""
    if visible.sum() < min_total:
        return None
    upper_valid = [i for i in upper_ids if visible[i] > 0]
    lower_valid = [i for i in lower_ids if visible[i] > 0]
    if len(upper_valid) < min_upper and len(lower_valid) < min_lower:
        return None
    if len(lower_valid) < min_lower:
        ids = upper_valid
    elif len(upper_valid) < min_upper:
        ids = lower_valid
    else:
        ids = upper_valid if prefer_upper else lower_valid
    chosen = keypoints[ids]
    x1, y1 = chosen.min(axis=0)
    x2, y2 = chosen.max(axis=0)
    return chosen.mean(axis=0), np.array([x2 - x1, y2 - y1]) * padding


def test_half_body_box_matches_upstream():
    rng = np.random.default_rng(3)
    outcomes = {"none": 0, "upper": 0, "lower": 0}
    for trial in range(600):
        keypoints = rng.uniform(0, 300, (17, 2))
        visible = rng.random(17) < rng.uniform(0.3, 1.0)
        prefer_upper = trial % 2 == 0
        aug = replace(TopdownAugment(), half_body_prob=1.0, half_body_upper_prob=1.0 if prefer_upper else 0.0)
        ours = half_body_box(keypoints, visible, META.upper_body_ids, META.lower_body_ids, aug, rng)
        expected = upstream_half_body(keypoints, visible, META.upper_body_ids, META.lower_body_ids, prefer_upper)
        assert (ours is None) == (expected is None), (visible, prefer_upper)
        if expected is None:
            outcomes["none"] += 1
            continue
        np.testing.assert_allclose(ours[0], expected[0], rtol=1e-12)
        np.testing.assert_allclose(ours[1], expected[1], rtol=1e-12)
        upper = keypoints[[i for i in META.upper_body_ids if visible[i]]]
        outcomes["upper" if len(upper) and np.allclose(expected[0], upper.mean(0)) else "lower"] += 1
    assert min(outcomes.values()) > 50, outcomes  # every branch was exercised


def test_half_body_probability():
    rng = np.random.default_rng(4)
    keypoints, visible = rng.uniform(0, 300, (17, 2)), np.ones(17, bool)
    hits = sum(half_body_box(keypoints, visible, META.upper_body_ids, META.lower_body_ids, TopdownAugment(), rng)
               is not None for _ in range(4000))
    assert abs(hits / 4000 - 0.3) < 0.025


def _truncnorm_cdf(x):
    return stats.truncnorm.cdf(x, -1.0, 1.0)  # upstream draws with scipy's truncnorm(-1, 1)


def test_box_shift_scale_rotation_follow_upstream_distributions():
    rng = np.random.default_rng(5)
    aug = TopdownAugment()
    center0, scale0 = np.array([100.0, 200.0]), np.array([60.0, 80.0])
    shifts, factors, rotations = [], [], []
    n = 20000
    for _ in range(n):
        center, scale, rotation = random_box(center0, scale0, aug, rng)
        shifts.append((center - center0) / (aug.shift_factor * scale0))
        factors.append(scale / scale0)
        rotations.append(rotation)
    shifts, factors, rotations = np.array(shifts), np.array(factors), np.array(rotations)
    moved = np.any(shifts != 0, axis=1)
    assert abs(moved.mean() - 0.3) < 0.015 and (shifts[~moved] == 0).all()
    assert np.abs(shifts).max() <= 1.0 and stats.kstest(shifts[moved].ravel(), _truncnorm_cdf).pvalue > 1e-3
    assert np.allclose(factors[:, 0], factors[:, 1])  # one factor for both sides
    z = (factors[:, 0] - 1.0) / 0.5
    assert np.abs(z).max() <= 1.0 and stats.kstest(z, _truncnorm_cdf).pvalue > 1e-3
    turned = rotations != 0
    assert abs(turned.mean() - 0.6) < 0.015
    assert np.abs(rotations).max() <= 80.0 and stats.kstest(rotations[turned] / 80.0, _truncnorm_cdf).pvalue > 1e-3


def test_shift_is_a_fraction_of_the_box_before_the_aspect_fix(tmp_path):
    """Upstream shifts by offset x bbox_scale in PoseRandomBBoxTransform; the aspect is fixed later,
    in PoseTopdownAffine. For a tall box the x shift is a fraction of its (narrow) padded width."""
    bbox = (140.0, 20.0, 40.0, 160.0)  # padded: 50 x 200; aspect-fixed: 150 x 200
    inst = PoseInstance(_write_image(tmp_path / "b.png"), 1, 1, bbox, np.zeros((17, 2), np.float32),
                        np.zeros(17, np.float32))
    dataset = TopdownPoseDataset([inst], META, (64, 48), replace(STILL, shift_prob=1.0))
    box_center, padded = np.array([160.0, 100.0]), np.array([50.0, 200.0])
    fractions = []
    for seed in range(300):
        inverse = dataset[(0, seed)]["inverse_affine"].double().numpy()
        crop_center = affine.transform_points(np.array([23.5, 31.5]), inverse)
        fractions.append((crop_center - box_center) / padded)
        corners = affine.transform_points(np.array([[0.0, 0.0], [47.0, 63.0]]), inverse)
        np.testing.assert_allclose(corners[1] - corners[0], [150.0, 200.0], atol=1e-3)  # size kept
    fractions = np.abs(np.array(fractions))
    assert fractions.max() <= 0.16 + 1e-6 and fractions[:, 0].max() > 0.12


def upstream_clip(bbox, img_w, img_h):
    """PoseBaseDataset.parse_data_info's box, then _is_valid_instance's w, h > 0 test; as xywh."""
    x, y, w, h = bbox
    x1, y1 = np.clip(x, 0, img_w - 1), np.clip(y, 0, img_h - 1)
    x2, y2 = np.clip(x + w, 0, img_w - 1), np.clip(y + h, 0, img_h - 1)
    if x2 - x1 <= 0 or y2 - y1 <= 0:
        return None
    return [x1, y1, x2 - x1, y2 - y1]


def test_box_clipping_matches_upstream():
    rng = np.random.default_rng(6)
    for _ in range(300):
        bbox = [rng.uniform(-100, 300), rng.uniform(-100, 300), rng.uniform(1, 200), rng.uniform(1, 200)]
        expected, ours = upstream_clip(bbox, 192, 256), clip_box(bbox, {"width": 192, "height": 256})
        assert (ours is None) == (expected is None)
        if expected is not None:
            np.testing.assert_allclose(ours, expected)
    assert clip_box([-5, -5, 500, 500], {}) == [-5, -5, 500, 500]  # no width / height: left as it is


def test_loaded_boxes_are_clipped_and_boxes_outside_are_skipped(tmp_path):
    ann_file = write_coco(tmp_path, "images", "train.json", num_images=2, seed=3)
    data = json.loads(ann_file.read_text())
    data["annotations"][0]["bbox"] = [-20.0, 10.0, 100.0, 300.0]  # the image is 192 x 256
    data["annotations"][1]["bbox"] = [200.0, 10.0, 50.0, 50.0]  # wholly right of the image
    ann_file.write_text(json.dumps(data))
    instances, skipped = load_instances(ann_file, tmp_path / "images", META)
    assert skipped == {"box outside the image": 1}
    first = next(i for i in instances if i.annotation_id == 1)
    np.testing.assert_allclose(first.bbox, upstream_clip([-20.0, 10.0, 100.0, 300.0], 192, 256))
    assert first.bbox == pytest.approx((0.0, 10.0, 80.0, 245.0))


@pytest.mark.parametrize("box_width, flag", [(40.0, cv2.INTER_CUBIC), (400.0, cv2.INTER_AREA)])
def test_crop_interpolation_is_area_when_shrinking_and_cubic_when_enlarging(tmp_path, box_width, flag):
    h, w = INPUT
    bbox = (10.0, 10.0, box_width, box_width * 4 / 3)
    path = _write_image(tmp_path / "c.png", size=(600, 500))
    inst = PoseInstance(path, 1, 1, bbox, np.zeros((17, 2), np.float32), np.zeros(17, np.float32))
    sample = TopdownPoseDataset([inst], META, INPUT)[0]
    center, scale = affine.box_to_center_scale(bbox, w / h, 1.25)
    matrix = affine.crop_matrix(center, scale, 0.0, INPUT)
    # PoseTopdownAffine: scale_factor = min of the row norms; INTER_AREA below 1, else INTER_CUBIC.
    scale_factor = min(np.linalg.norm(matrix[0, :2]), np.linalg.norm(matrix[1, :2]))
    assert (cv2.INTER_AREA if scale_factor < 1.0 else cv2.INTER_CUBIC) == flag
    image = cv2.cvtColor(cv2.imread(path), cv2.COLOR_BGR2RGB)
    expected = cv2.warpAffine(image, matrix, (w, h), flags=flag)
    np.testing.assert_array_equal(sample["image"].permute(1, 2, 0).numpy(), expected)


def test_augmented_samples_depend_only_on_the_sample_key(tiny_coco):
    """Bit-exact resume: every draw (geometry and albumentations) comes from the per-sample generator."""
    instances, _ = load_instances(tiny_coco / "annotations/person_keypoints_train2017.json",
                                  tiny_coco / "train2017", META)
    first, second = (TopdownPoseDataset(instances, META, INPUT, TopdownAugment()) for _ in range(2))
    for key in [(0, 11), (3, 5), (0, 11)]:
        a, b = first[key], second[key]
        assert torch.equal(a["image"], b["image"]) and torch.equal(a["keypoints"], b["keypoints"])
    assert not torch.equal(first[(0, 11)]["image"], first[(0, 12)]["image"])


def test_bad_augment_values_are_named_in_one_error():
    with pytest.raises(ValueError) as info:
        TopdownAugment(dropout_prob=1.5, scale_range=(2.0, 1.0), dropout_holes=(0, 1), dropout_size=(0.3, 0.2))
    message = str(info.value)
    for name in ("dropout_prob", "scale_range", "dropout_holes", "dropout_size"):
        assert name in message, message
