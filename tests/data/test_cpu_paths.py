"""Dense geometry gives the same targets on every CPU: each test runs under the OpenCV code paths a host can take
(IPP + SIMD, SIMD without IPP, plain C++), so a machine without AVX-512 still exercises more than its own.

Nearest warps (labels, masks, depth, pointmaps) are the data layer's own gather and must be bit-identical on
every path; linear warps (images, normals, alpha, foreground) stay OpenCV's, within the tolerances below. Measured
over 12 seeds of these samples (the colour gains after the warp amplify its rounding): on an AVX2 host, images
differ by up to 3 grey levels on at most 0.8% of the pixels; on an AVX-512 host (AMD EPYC with avx512_bf16,
OpenCV 5.1), the plain C++ path differs from IPP + SIMD by up to 3 grey levels on up to 11.9% of the pixels (mean
0.15 grey level) and SIMD alone by up to 4 on 0.54%. Float maps differ by up to 2.5e-5 on both.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from datamodules.dense.augment import resolve_augment
from datamodules.dense.files import list_samples
from datamodules.dense_dataset import load_sample
from datamodules.dense.geometry import (
    NearestWarp, compose, rotation_matrix, scale_offset_matrix, stretch_matrix, warp_nearest, warp_sample,
)
from datamodules.dense.transforms import DenseTransform
from opencv_paths import PATHS, set_path
from sapiens2_ft.tasks.dense_data import dense_targets
from sapiens2_ft.tasks.registry import TASKS

DENSE_TASKS = [name for name, spec in TASKS.items() if spec.data.targets is not None]
SIZE = (128, 96)
# Grey levels: the largest difference, and the mean one (rounding moves a pixel by one level, a shifted warp by many).
IMAGE_TOLERANCE, IMAGE_MEAN = 4, 0.5
FLOAT_TOLERANCE = 5e-5
NEAREST = ("labels", "mask", "depth", "pointmap", "K")


def reference_nearest(array, matrix, size, border):
    """Per-pixel loop of the documented rule: A^-1 in numpy's inverse, round half up, border outside."""
    inverse = np.linalg.inv(np.vstack([matrix, [0, 0, 1]]))
    out = np.full((size[0], size[1]) + array.shape[2:], border, array.dtype)
    for y, x in itertools.product(range(size[0]), range(size[1])):
        u, v, _ = inverse @ [x, y, 1.0]
        col, row = int(np.floor(u + 0.5)), int(np.floor(v + 0.5))
        if 0 <= row < array.shape[0] and 0 <= col < array.shape[1]:
            out[y, x] = array[row, col]
    return out


@pytest.mark.parametrize("matrix", [
    scale_offset_matrix(2.5, 0.0, 0.0), scale_offset_matrix(0.5, 0.0, 0.0), scale_offset_matrix(0.37, 3.2, -1.7),
    stretch_matrix((30, 40), (45, 23)), compose(rotation_matrix(33.0, (30, 40)), scale_offset_matrix(1.3, -2.0, 4.0)),
], ids=["up2.5", "down0.5-ties", "down-shift", "stretch", "rotate"])
def test_warp_nearest_follows_its_rounding_rule(matrix):
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 29, (30, 40), dtype=np.uint8)
    pointmap = rng.standard_normal((30, 40, 3)).astype(np.float32)
    size = (33, 47)
    np.testing.assert_array_equal(warp_nearest(labels, matrix, size, 255), reference_nearest(labels, matrix, size, 255))
    np.testing.assert_array_equal(warp_nearest(pointmap, matrix, size), reference_nearest(pointmap, matrix, size, 0))


def test_a_half_scale_tie_goes_to_the_larger_index():
    """Shrinking by 2, output pixel x's centre maps to source 2x + 0.5, between two pixels: the rule takes 2x + 1."""
    warp = NearestWarp(scale_offset_matrix(0.5, 0.0, 0.0), (2, 3), (4, 6))
    assert warp.separable and warp.cols.tolist() == [1, 3, 5] and warp.rows.tolist() == [1, 3]
    values = np.arange(24).reshape(4, 6)
    np.testing.assert_array_equal(warp(values), [[7, 9, 11], [19, 21, 23]])


def test_separable_and_general_gathers_agree():
    """A scale-and-shift warp through both code paths (the general one forced by a zero-angle shear term)."""
    values = np.random.default_rng(2).integers(0, 255, (30, 40), dtype=np.uint8)
    matrix = scale_offset_matrix(1.7, -3.0, 2.0)
    general = NearestWarp(matrix + [[0, 1e-300, 0], [0, 0, 0]], (45, 50), values.shape)
    assert not general.separable
    np.testing.assert_array_equal(general(values, 9), warp_nearest(values, matrix, (45, 50), 9))


def _samples(dense_root):
    for task in DENSE_TASKS:  # every dense task's maps, albedo's included
        samples, _ = list_samples(dense_root, "train", dense_targets(task))
        yield task, load_sample(samples[2], dense_targets(task), 29)


def _augmented(dense_root, seeds=range(4)):
    """Every task's first sample through its training pipeline (every geometric step on) and validation resize."""
    out = {}
    for task, data in _samples(dense_root):
        augment = dict(flip_prob=0.5)
        if task != "matting":
            augment.update(scale_prob=1.0, crop_prob=1.0, rotate_prob=1.0 if task != "pointmap" else 0.0)
        maps = dense_targets(task).maps  # how the task's maps move
        train = DenseTransform(SIZE, resolve_augment(augment, dense_targets(task)), num_classes=29, maps=maps)
        for seed in seeds:
            out[task, seed] = train(data, np.random.default_rng(seed))
        out[task, "val"] = DenseTransform(SIZE, num_classes=29, maps=maps)(data)
    return out


def test_dense_targets_are_the_same_on_every_opencv_path(dense_root):
    results = {}
    colours = {kind for task in DENSE_TASKS for kind, rule in dense_targets(task).maps.items() if rule.colour}
    for name in PATHS:
        set_path(name)
        try:
            results[name] = _augmented(dense_root)
        finally:
            set_path("ipp+simd")
    reference = results["ipp+simd"]
    for name, result in results.items():
        for key, sample in result.items():
            for field, value in sample.items():
                expected = reference[key][field]
                where = f"{name} {key} {field}"
                if field in NEAREST:
                    np.testing.assert_array_equal(value, expected, err_msg=where)
                elif field in colours:  # colour-changed as 8-bit images, as the image is
                    diff = np.abs(np.round(value * 255) - np.round(expected * 255))
                    assert diff.max() <= IMAGE_TOLERANCE and diff.mean() <= IMAGE_MEAN, where
                elif value.dtype == np.uint8:
                    diff = np.abs(value.astype(np.int16) - expected.astype(np.int16))
                    assert diff.max() <= IMAGE_TOLERANCE and diff.mean() <= IMAGE_MEAN, where
                else:
                    np.testing.assert_allclose(value, expected, atol=FLOAT_TOLERANCE, rtol=0, err_msg=where)


def test_flipped_pipelines_are_exact_mirrors(dense_root, opencv_path):
    """Equal draws with flip_prob 0 and 1 give mirror images on every path, noise and dropout included (the flip
    is applied last)."""
    from datamodules.dense.geometry import SAPIENS2_FLIP_CLASSES, check_flip_classes

    table = check_flip_classes(SAPIENS2_FLIP_CLASSES, 29)
    for task, data in _samples(dense_root):
        extra = {"seg": dict(rotate_prob=1.0, noise_prob=1.0, dropout_prob=1.0, photometric_prob=1.0),
                 "normal": dict(crop_prob=1.0, scale_prob=1.0, rotate_prob=1.0, noise_prob=1.0, blur_prob=1.0),
                 "pointmap": dict(crop_prob=1.0, scale_prob=1.0, dropout_prob=1.0),
                 "matting": dict(photometric_prob=1.0, dropout_prob=1.0),
                 "albedo": dict(crop_prob=1.0, scale_prob=1.0, rotate_prob=1.0, photometric_prob=1.0)}[task]
        targets = dense_targets(task)
        plain, flipped = (DenseTransform(SIZE, resolve_augment(dict(extra, flip_prob=flip), targets), num_classes=29,
                                         maps=targets.maps)(data, np.random.default_rng(5))
                          for flip in (0.0, 1.0))
        assert np.array_equal(flipped["image"][:, ::-1], plain["image"]), task
        if "labels" in plain:
            assert np.array_equal(flipped["labels"][:, ::-1], table[plain["labels"]])
        if "normals" in plain:
            np.testing.assert_array_equal(flipped["normals"][:, ::-1] * [-1, 1, 1], plain["normals"])
        if "mask" in plain:
            assert np.array_equal(flipped["mask"][:, ::-1], plain["mask"]), task
        if "albedo" in plain:
            assert np.array_equal(flipped["albedo"][:, ::-1], plain["albedo"]), task


def test_warp_sample_nearest_maps_do_not_use_opencv(opencv_path):
    """A rotated, shrunk warp of labels, mask and depth equals the rule's reference on each path."""
    rng = np.random.default_rng(1)
    sample = {"image": rng.integers(0, 256, (50, 70, 3), dtype=np.uint8),
              "labels": rng.integers(0, 29, (50, 70), dtype=np.uint8), "mask": rng.random((50, 70)) > 0.3,
              "depth": rng.uniform(1, 3, (50, 70)).astype(np.float32)}
    matrix = compose(rotation_matrix(17.0, (50, 70)), scale_offset_matrix(0.83, 1.5, -2.5))
    maps = {**dense_targets("seg").maps, **dense_targets("pointmap").maps}
    out = warp_sample(sample, matrix, (41, 57), label_border=0, maps=maps)
    np.testing.assert_array_equal(out["labels"], reference_nearest(sample["labels"], matrix, (41, 57), 0))
    np.testing.assert_array_equal(out["depth"], reference_nearest(sample["depth"], matrix, (41, 57), 0))
    expected_mask = reference_nearest(sample["mask"], matrix, (41, 57), False) & (out["depth"] > 0)
    np.testing.assert_array_equal(out["mask"], expected_mask)
