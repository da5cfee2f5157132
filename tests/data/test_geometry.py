"""Top-down crop geometry: the UDP crop affine, its inverse, rotation, flip, half-body and box jitter."""

from __future__ import annotations

from dataclasses import replace

import cv2
import numpy as np
import pytest
import torch

from datamodules.coco_keypoints import load_instances
from datamodules.keypoints.metainfo import load_metainfo
from datamodules.pose_dataset import TopdownPoseDataset
from datamodules.transforms import affine
from datamodules.transforms.topdown import TopdownAugment, half_body_box, random_box
from sapiens2_ft.tasks.pose.codec import encode_heatmaps, flip_heatmaps, input_to_heatmap_coords

INPUT = (256, 192)  # (H, W)
# No randomness at all unless a test switches one part on.
STILL = TopdownAugment(flip_prob=0.0, half_body_prob=0.0, shift_prob=0.0, scale_range=(1.0, 1.0),
                       rotate_prob=0.0, photometric_prob=0.0, blur_prob=0.0, median_blur_prob=0.0,
                       dropout_prob=0.0)


def _random_crop(rng, output_size=INPUT):
    center = rng.uniform(50, 600, size=2)
    scale = affine.fix_aspect(rng.uniform(20, 500, size=2), output_size[1] / output_size[0])
    rotation = rng.uniform(-180, 180)
    return center, scale, rotation


@pytest.mark.parametrize("flip", [False, True])
def test_crop_and_inverse_round_trip(flip):
    rng = np.random.default_rng(1 + flip)
    for _ in range(50):
        center, scale, rotation = _random_crop(rng)
        matrix = affine.crop_matrix(center, scale, rotation, INPUT)
        if flip:
            matrix = affine.compose(affine.hflip_matrix(INPUT[1]), matrix)
        points = rng.uniform(-100, 900, size=(40, 2))
        crop = affine.transform_points(points, matrix)
        back = affine.transform_points(crop, affine.invert(matrix))
        assert np.abs(back - points).max() < 0.5
        assert np.abs(back - points).max() < 1e-6  # in fact exact up to float error
        # The crop is a similarity up to the aspect scaling: not a no-op.
        assert np.abs(crop - points).max() > 1.0


@pytest.mark.parametrize("flip", [False, True])
def test_box_centre_lands_on_crop_centre(flip):
    rng = np.random.default_rng(3)
    h, w = INPUT
    for _ in range(20):
        center, scale, rotation = _random_crop(rng)
        matrix = affine.crop_matrix(center, scale, rotation, INPUT)
        if flip:
            matrix = affine.compose(affine.hflip_matrix(w), matrix)
        np.testing.assert_allclose(affine.transform_points(center, matrix), [(w - 1) / 2, (h - 1) / 2], atol=1e-9)


def test_box_edges_land_on_first_and_last_pixel_centres():
    h, w = INPUT
    center, scale = np.array([300.0, 200.0]), np.array([150.0, 200.0])
    matrix = affine.crop_matrix(center, scale, 0.0, INPUT)
    corners = center + np.array([[-0.5, -0.5], [0.5, 0.5]]) * scale
    np.testing.assert_allclose(affine.transform_points(corners, matrix), [[0, 0], [w - 1, h - 1]], atol=1e-9)
    flipped = affine.compose(affine.hflip_matrix(w), matrix)
    np.testing.assert_allclose(affine.transform_points(corners, flipped), [[w - 1, 0], [0, h - 1]], atol=1e-9)


def test_box_to_center_scale_pads_and_fixes_aspect():
    center, scale = affine.box_to_center_scale([10, 20, 30, 100], aspect_ratio=0.75, padding=1.25)
    np.testing.assert_allclose(center, [25, 70])
    np.testing.assert_allclose(scale, [125 * 0.75, 125])  # width grown to the aspect ratio
    center, scale = affine.box_to_center_scale([0, 0, 300, 100], aspect_ratio=0.75, padding=1.0)
    np.testing.assert_allclose(scale, [300, 400])  # height grown
    assert scale[0] / scale[1] == pytest.approx(0.75)


def _blob_image(point, size=(480, 640), sigma=2.0):
    """A dark float image with one Gaussian dot at ``point`` (x, y)."""
    h, w = size
    yy, xx = np.mgrid[0:h, 0:w]
    return (255 * np.exp(-((xx - point[0]) ** 2 + (yy - point[1]) ** 2) / (2 * sigma**2))).astype(np.float32)


@pytest.mark.parametrize("rotation", [0.0, 30.0, -75.0, 90.0, 160.0])
@pytest.mark.parametrize("flip", [False, True])
def test_rotated_warp_moves_keypoints_with_the_image(rotation, flip):
    keypoints = np.array([[300.0, 150.0], [360.0, 260.0], [250.0, 320.0], [330.0, 205.0]])
    center, scale = np.array([310.0, 240.0]), np.array([240.0, 320.0])
    matrix = affine.crop_matrix(center, scale, rotation, INPUT)
    if flip:
        matrix = affine.compose(affine.hflip_matrix(INPUT[1]), matrix)
    expected = affine.transform_points(keypoints, matrix)
    for point, want in zip(keypoints, expected):
        warped = affine.warp_image(_blob_image(point), matrix, INPUT)
        y, x = np.unravel_index(np.argmax(warped), warped.shape)
        assert np.hypot(x - want[0], y - want[1]) <= 1.0, (rotation, flip, (x, y), want)
        # Sub-pixel check: intensity-weighted centroid of the bright blob.
        mask = warped > 0.2 * warped.max()
        yy, xx = np.nonzero(mask)
        wts = warped[mask]
        centroid = np.array([(xx * wts).sum(), (yy * wts).sum()]) / wts.sum()
        assert np.hypot(*(centroid - want)) < 0.35


def test_rotation_direction_is_the_same_for_image_and_points():
    # Several bright dots in one uint8 image (as the dataset warps it), 90 degree rotation.
    image = np.zeros((480, 640, 3), np.uint8)
    keypoints = np.array([[320.0, 140.0], [420.0, 240.0], [320.0, 340.0]])
    for x, y in keypoints:
        cv2.circle(image, (int(x), int(y)), 2, (255, 255, 255), -1)
    matrix = affine.crop_matrix([320.0, 240.0], [300.0, 400.0], 90.0, INPUT)
    warped = affine.warp_image(image, matrix, INPUT)[..., 0].astype(np.float32)
    expected = affine.transform_points(keypoints, matrix)
    # The three dots are far apart in the crop: each sits at its own local maximum.
    for want in expected:
        x0, y0 = int(round(want[0])), int(round(want[1]))
        window = warped[y0 - 8:y0 + 9, x0 - 8:x0 + 9]
        assert window.max() > 100
        y, x = np.unravel_index(np.argmax(window), window.shape)
        assert np.hypot(x - 8, y - 8) <= 1.0
    # The points moved: a 90 degree turn swaps which axis separates dot 0 from dot 2.
    assert abs(expected[0, 0] - expected[2, 0]) > 50 and abs(expected[0, 1] - expected[2, 1]) < 1e-6


def test_crop_rotation_is_a_rotation():
    """At equal x / y scales the crop's linear part is a rotation (orthonormal, det +1, not a shear or a mirror), and
    a positive angle brings the point above the box centre to the right of the crop centre."""
    h, w = INPUT
    matrix = affine.crop_matrix([100.0, 80.0], [w - 1.0, h - 1.0], 30.0, INPUT)  # 1 crop px per image px
    np.testing.assert_allclose(matrix[:, :2] @ matrix[:, :2].T, np.eye(2), atol=1e-12)
    assert np.linalg.det(matrix[:, :2]) == pytest.approx(1.0)
    turned = affine.transform_points(np.array([[100.0, 70.0]]), affine.crop_matrix([100.0, 80.0], [w - 1.0, h - 1.0],
                                                                                   90.0, INPUT))
    np.testing.assert_allclose(turned[0], [(w - 1) / 2 + 10.0, (h - 1) / 2], atol=1e-9)


def test_inside_crop_bounds_and_crop_interpolation():
    h, w = INPUT
    points = np.array([[0.0, 0.0], [w - 1e-3, h - 1e-3], [w, 5.0], [5.0, h], [-1e-3, 5.0], [5.0, -1e-3]])
    assert affine.inside_crop(points, INPUT).tolist() == [True, True, False, False, False, False]
    # INTER_AREA below a scale of 1 (the smaller row norm of the linear part, the translation left out)
    wide = affine.crop_matrix([900.0, 700.0], [2 * (w - 1.0), (h - 1.0) / 2], 0.0, INPUT)  # x 0.5, y 2, far away
    tall = affine.crop_matrix([900.0, 700.0], [(w - 1.0) / 2, 2 * (h - 1.0)], 0.0, INPUT)  # x 2, y 0.5
    near = affine.crop_matrix([50.0, 60.0], [(w - 1.0) / 1.2, (h - 1.0) / 1.2], 0.0, INPUT)  # x 1.2
    assert [affine.crop_interpolation(m) for m in (wide, tall, near)] == [cv2.INTER_AREA, cv2.INTER_AREA,
                                                                          cv2.INTER_CUBIC]


@pytest.fixture(scope="module")
def train_instances(tiny_coco):
    meta = load_metainfo("coco17")
    instances, _ = load_instances(tiny_coco / "annotations/person_keypoints_train2017.json",
                                  tiny_coco / "train2017", meta)
    return meta, instances


def test_flip_augmentation_matches_flipped_heatmaps(train_instances, opencv_path):
    meta, instances = train_instances
    flipped_set = TopdownPoseDataset(instances, meta, INPUT, replace(STILL, flip_prob=1.0))
    plain_set = TopdownPoseDataset(instances, meta, INPUT, replace(STILL, flip_prob=0.0))
    heatmap_size = (64, 48)
    h, w = INPUT
    for index in range(len(instances)):
        flipped, plain = flipped_set[index], plain_set[index]
        # The image is the mirror image up to interpolation rounding (the flip is part of the crop's warp). Measured
        # on every OpenCV path: 5.1 at most 1 grey level; 4.12 up to 5 on 0.2% of the pixels, mean 0.012.
        diff = (flipped["image"].flip(-1).int() - plain["image"].int()).abs()
        assert diff.float().mean() < 0.1 and (diff > 1).float().mean() < 0.005 and diff.max() <= 8

        kf, kp = flipped["keypoints"].double(), plain["keypoints"].double()
        assert not torch.allclose(kf, kp, atol=1.0)
        mirrored = kf.clone()
        mirrored[:, 0] = (w - 1) - mirrored[:, 0]
        idx = torch.as_tensor(meta.flip_indices)
        assert torch.allclose(mirrored[idx], kp, atol=1e-3)
        assert torch.equal(flipped["keypoint_weights"][idx], plain["keypoint_weights"])

        hm_f, tw_f = encode_heatmaps(input_to_heatmap_coords(flipped["keypoints"], INPUT, heatmap_size),
                                     flipped["keypoint_weights"], heatmap_size, sigma=2.0)
        hm_p, tw_p = encode_heatmaps(input_to_heatmap_coords(plain["keypoints"], INPUT, heatmap_size),
                                     plain["keypoint_weights"], heatmap_size, sigma=2.0)
        assert hm_p.amax() > 0.5
        back = flip_heatmaps(hm_f, meta.flip_indices)
        assert torch.allclose(back, hm_p, atol=1e-4)
        assert torch.equal(tw_f[idx], tw_p)
        # Without the channel swap the maps would not match (left and right differ).
        assert not torch.allclose(hm_f.flip(-1), hm_p, atol=1e-2)


def test_dataset_without_flip_is_deterministic_under_still_augment(train_instances):
    """STILL (all probabilities 0, scale 1) must crop exactly like validation (augment=None)."""
    meta, instances = train_instances
    still = TopdownPoseDataset(instances, meta, INPUT, STILL)[0]
    val = TopdownPoseDataset(instances, meta, INPUT, None)[0]
    assert torch.equal(still["image"], val["image"])
    assert torch.allclose(still["keypoints"], val["keypoints"], atol=1e-4)


# A standing figure in a unit box (x right, y down), COCO-17 order.
FIGURE = np.array([[.5, .08], [.54, .06], [.46, .06], [.58, .08], [.42, .08], [.66, .22], [.34, .22],
                   [.72, .38], [.28, .38], [.75, .52], [.25, .52], [.6, .55], [.4, .55], [.62, .75],
                   [.38, .75], [.62, .95], [.38, .95]])


def _figure(bw=80.0, bh=200.0, x0=100.0, y0=50.0):
    return FIGURE * [bw, bh] + [x0, y0]


@pytest.mark.parametrize("upper", [True, False])
def test_half_body_box_surrounds_the_chosen_half(upper):
    meta = load_metainfo("coco17")
    keypoints = _figure()
    visible = np.ones(17, bool)
    aug = replace(STILL, half_body_prob=1.0, half_body_upper_prob=1.0 if upper else 0.0)
    rng = np.random.default_rng(0)
    center, scale = half_body_box(keypoints, visible, meta.upper_body_ids, meta.lower_body_ids, aug, rng)
    chosen = list(meta.upper_body_ids if upper else meta.lower_body_ids)
    other = list(meta.lower_body_ids if upper else meta.upper_body_ids)
    low, high = keypoints[chosen].min(0), keypoints[chosen].max(0)
    np.testing.assert_allclose(center, keypoints[chosen].mean(0))  # upstream: the mean, not the box centre
    np.testing.assert_allclose(scale, (high - low) * aug.half_body_padding)  # aspect fixed later, at the crop
    scale = affine.fix_aspect(scale, 0.75)
    # Chosen keypoints inside the box; the far end of the other half outside it.
    inside = np.abs(keypoints - center) <= scale / 2
    assert inside[chosen].all()
    far = [meta.index("left_ankle"), meta.index("right_ankle")] if upper else [meta.index("nose")]
    assert not inside[far].all(axis=1).any()
    assert set(far) <= set(other)


def test_half_body_box_falls_back_and_declines():
    meta = load_metainfo("coco17")
    keypoints = _figure()
    aug = replace(STILL, half_body_prob=1.0, half_body_upper_prob=1.0, half_body_min_keypoints=9)
    rng = np.random.default_rng(0)
    # Too few visible keypoints: no half-body crop.
    visible = np.zeros(17, bool)
    visible[:8] = True
    assert half_body_box(keypoints, visible, meta.upper_body_ids, meta.lower_body_ids, aug, rng) is None
    # Upper body asked for but only one upper keypoint visible: the lower body is used.
    visible = np.zeros(17, bool)
    visible[list(meta.lower_body_ids)] = True
    visible[meta.index("nose")] = True
    aug = replace(aug, half_body_min_keypoints=5)
    center, _ = half_body_box(keypoints, visible, meta.upper_body_ids, meta.lower_body_ids, aug, rng)
    np.testing.assert_allclose(center, keypoints[list(meta.lower_body_ids)].mean(0))


def test_half_body_crop_in_dataset(train_instances):
    meta, instances = train_instances
    dataset = TopdownPoseDataset(instances, meta, INPUT,
                                 replace(STILL, half_body_prob=1.0, half_body_upper_prob=1.0))
    h, w = INPUT
    for index in range(len(instances)):
        kpts = dataset[index]["keypoints"].numpy()
        upper, lower = kpts[list(meta.upper_body_ids)], kpts[[meta.index("left_ankle"), meta.index("right_ankle")]]
        assert (upper >= -0.5).all() and (upper[:, 0] <= w - 0.5).all() and (upper[:, 1] <= h - 0.5).all()
        assert (lower[:, 1] > h - 1).all()  # the ankles fall below the crop


def test_random_box_respects_bounds():
    rng = np.random.default_rng(0)
    aug = replace(STILL, shift_prob=1.0, shift_factor=0.16, scale_range=(0.5, 1.5), rotate_prob=1.0,
                  rotate_factor=40.0)
    center0, scale0 = np.array([100.0, 200.0]), np.array([60.0, 80.0])
    factors, rotations, shifts = [], [], []
    for _ in range(2000):
        center, scale, rotation = random_box(center0, scale0, aug, rng)
        factor = scale / scale0
        assert factor[0] == pytest.approx(factor[1])  # aspect kept
        factors.append(factor[0])
        rotations.append(rotation)
        shifts.append((center - center0) / scale0)
    factors, rotations, shifts = np.array(factors), np.array(rotations), np.abs(np.array(shifts))
    assert factors.min() >= 0.5 and factors.max() <= 1.5
    assert factors.min() < 0.6 and factors.max() > 1.4  # the whole range is used
    assert np.abs(rotations).max() <= 40.0
    assert np.abs(rotations).max() > 30.0
    assert shifts.max() <= 0.16 + 1e-12 and shifts.max() > 0.14


def test_random_box_off_switches():
    rng = np.random.default_rng(0)
    center0, scale0 = np.array([100.0, 200.0]), np.array([60.0, 80.0])
    for _ in range(100):
        center, scale, rotation = random_box(center0, scale0, replace(STILL, scale_range=(0.8, 0.8)), rng)
        assert rotation == 0.0
        np.testing.assert_array_equal(center, center0)
        np.testing.assert_allclose(scale, scale0 * 0.8)
    # Rotation at probability 1 with factor 0 is still no rotation; never beyond the factor otherwise.
    rotations = [random_box(center0, scale0, replace(STILL, rotate_prob=1.0, rotate_factor=10.0), rng)[2]
                 for _ in range(500)]
    assert all(abs(r) <= 10.0 for r in rotations) and any(r != 0.0 for r in rotations)
