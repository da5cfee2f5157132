"""Per-task dense augmentation (upstream Sapiens2 recipes), its geometry, the image ops and the sample filters."""

from __future__ import annotations

import dataclasses

import shutil

import cv2
import numpy as np
import pytest
import torch

from datamodules.dense.augment import CameraPipeline, DenseAugment, SegPipeline, resolve_augment, validation_fit
from datamodules.dense.background import BackgroundSource, replace_background
from datamodules.dense.files import list_samples
from datamodules.dense.filters import DenseFilter
from datamodules.dense.geometry import back_project, rotation_matrix, warp_sample
from datamodules.dense.photometric import gaussian_noise, photometric_distortion, solarize
from datamodules.dense.transforms import DenseTransform
from datamodules.dense_dataset import DenseDataset
from datamodules.errors import DataError
from sapiens2_ft.tasks.dense_data import DenseTaskData, dense_targets
from sapiens2_ft.tasks.registry import TASKS

SIZE = (128, 96)
OFF = dict(flip_prob=0.0, scale_prob=0.0, crop_prob=0.0, rotate_prob=0.0, downup_prob=0.0, photometric_prob=0.0,
           blur_prob=0.0, noise_prob=0.0, solarize_prob=0.0, dropout_prob=0.0)


def test_task_defaults_are_upstream_and_checked():
    seg = resolve_augment(DenseAugment(), dense_targets("seg"))  # dense/configs/seg/shutterstock_goliath train_pipeline
    assert (seg.pipeline, seg.background_prob, seg.scale_range, seg.crop_prob, seg.crop_max_class_ratio) == (
        "seg", 0.8, (0.4, 2.0), 0.3, 0.75)
    assert (seg.rotate_prob, seg.rotate_degrees, seg.blur_prob, seg.noise_prob) == (0.5, 60, 0.3, 0.3)
    assert (seg.flip_prob, seg.scale_prob, seg.photometric_prob) == (0.5, 1.0, 1.0)
    normal = resolve_augment({}, dense_targets("normal"))  # dense/configs/normal/metasim_render_people
    assert (normal.pipeline, normal.scale_range, normal.scale_prob, normal.crop_prob, normal.flip_prob) == (
        "camera", (0.5, 2.0), 0.3, 0.3, 0.3)
    assert (normal.crop_area_range, normal.crop_aspect_range, normal.downup_prob, normal.downup_range) == (
        (0.4, 1.0), (0.5, 2.0), 0.2, (0.1, 0.7))
    assert (normal.blur_prob, normal.noise_prob, normal.solarize_prob, normal.rotate_prob) == (0.3, 0.3, 0.3, 0.0)
    pointmap = resolve_augment({}, dense_targets("pointmap"))  # no down/up-sampling, blur, noise or solarize upstream
    assert (pointmap.downup_prob, pointmap.blur_prob, pointmap.noise_prob, pointmap.solarize_prob) == (0, 0, 0, 0)
    old = resolve_augment({"pipeline": "generic"}, dense_targets("seg"))  # the generic set, for every task that asks
    assert (old.flip_prob, old.scale_range, old.photometric_prob, old.blur_prob, old.dropout_prob) == (
        0.5, (0.75, 1.5), 0.5, 0.1, 0.0)
    matting = resolve_augment({}, dense_targets("matting"))  # the generic set without blur (breaks I = aF + (1 - a)B)
    assert matting == dataclasses.replace(old, blur_prob=0.0)
    assert validation_fit(seg, dense_targets("seg")) == "stretch"
    assert validation_fit(None, dense_targets("normal")) == "letterbox"
    once = resolve_augment({"flip_prob": 0.1}, dense_targets("seg"))
    assert resolve_augment(once, dense_targets("seg")).flip_prob == 0.1  # idempotent
    with pytest.raises(ValueError, match="rotate_prob must be 0 for task 'pointmap'"):
        resolve_augment({"rotate_prob": 0.5}, dense_targets("pointmap"))
    with pytest.raises(ValueError, match=r"crop_area_range is not used by the 'seg'.*flip_prob must be in \[0, 1\]"):
        resolve_augment({"crop_area_range": (0.2, 0.5), "flip_prob": 1.5}, dense_targets("seg"))
    with pytest.raises(ValueError, match="rotate_prob is not used by the 'generic'"):
        resolve_augment({"rotate_prob": 0.5}, dense_targets("matting"))
    with pytest.raises(ValueError, match="scale_range must be"):
        resolve_augment({"scale_range": (2.0, 1.0)}, dense_targets("normal"))
    for name, spec in TASKS.items():  # the validation resize of a task's own pipeline is its spec's resize
        if spec.data.targets is not None:
            assert validation_fit(None, spec.data.targets) == spec.resize
            assert validation_fit(resolve_augment({}, spec.data.targets), spec.data.targets) == spec.resize


def _sphere(shape, centre, radius):
    """Normals (camera-facing) and mask of a sphere seen at ``centre`` (x, y) with image ``radius``."""
    v, u = np.mgrid[0:shape[0], 0:shape[1]].astype(np.float64)
    dx, dy = (u - centre[0]) / radius, (v - centre[1]) / radius
    inside = dx ** 2 + dy ** 2 < 1
    normals = np.stack([dx, dy, -np.sqrt(np.clip(1 - dx ** 2 - dy ** 2, 0, 1))], -1).astype(np.float32)
    normals[~inside] = 0
    return normals, inside


def _erode(mask, pixels=2):
    return cv2.erode(mask.astype(np.uint8), np.ones((2 * pixels + 1,) * 2, np.uint8)) > 0


def test_rotation_turns_normals_and_rotating_back_restores_labels():
    shape, angle = (120, 100), 40.0
    normals, mask = _sphere(shape, (60, 40), 25)
    v, u = np.mgrid[0:shape[0], 0:shape[1]]
    labels = ((np.arctan2(v - 60.0, u - 50.0) + np.pi) / (np.pi / 4)).astype(np.uint8) % 8  # 8 sectors
    sample = {"image": np.zeros((*shape, 3), np.uint8), "normals": normals, "mask": mask, "labels": labels}
    maps = {**dense_targets("normal").maps, **dense_targets("seg").maps}
    matrix = rotation_matrix(angle, shape)
    out = warp_sample(sample, matrix, shape, roll=angle, maps=maps)
    centre = matrix @ np.array([60.0, 40.0, 1.0])  # the sphere is seen where its centre went
    expected, expected_mask = _sphere(shape, centre, 25)
    core = _erode(expected_mask) & out["mask"]
    assert core.sum() > 1500
    cosine = (out["normals"][core] * expected[core]).sum(-1)
    assert np.degrees(np.arccos(np.clip(cosine, -1, 1))).max() < 1.0  # 40 deg off without turning the normals
    back = warp_sample(out, rotation_matrix(-angle, shape), shape, roll=-angle, maps=maps)
    disc = (u - 49.5) ** 2 + (v - 59.5) ** 2 < 45 ** 2  # never outside the image on the way
    boundary = cv2.dilate(cv2.Canny(labels * 30, 1, 1), np.ones((3, 3), np.uint8)) > 0
    assert np.array_equal(back["labels"][disc & ~boundary], labels[disc & ~boundary])
    np.testing.assert_allclose(back["normals"][_erode(mask, 3)], normals[_erode(mask, 3)], atol=0.03)
    with pytest.raises(ValueError, match="not rotated"):
        warp_sample({**sample, "K": np.eye(3, dtype=np.float32)}, matrix, shape, roll=angle, maps=maps)


def test_camera_pipeline_keeps_normals_radial_after_rotation_scale_crop_flip():
    """A sphere's (n_x, n_y) point away from its centre: after any similarity of the image they still must."""
    normals, mask = _sphere((160, 120), (55, 90), 40)
    sample = {"image": np.full((160, 120, 3), 128, np.uint8), "normals": normals, "mask": mask}
    augment = resolve_augment(dict(OFF, rotate_prob=1.0, scale_prob=1.0, crop_prob=1.0, flip_prob=0.5,
                                   crop_area_range=(0.8, 1.0)), dense_targets("normal"))
    transform = DenseTransform(SIZE, augment, maps=dense_targets("normal").maps)
    checked = 0
    for seed in range(8):
        out = transform(sample, np.random.default_rng(seed))
        keep = _erode(out["mask"], 2)
        if keep.sum() < 200:
            continue
        rows, cols = np.nonzero(keep)
        n = out["normals"][keep].astype(np.float64)
        # p = c + r * n_xy for one centre c and radius r: solve, then every pixel must agree within ~1 px
        a = np.zeros((2 * len(n), 3))
        a[0::2, 0], a[1::2, 1], a[0::2, 2], a[1::2, 2] = 1, 1, n[:, 0], n[:, 1]
        p = np.empty(2 * len(n))
        p[0::2], p[1::2] = cols, rows
        solution, *_ = np.linalg.lstsq(a, p, rcond=None)
        assert np.abs(a @ solution - p).max() < 1.5, seed
        checked += 1
    assert checked >= 5


def _pointmap_sample(shape=(90, 120)):
    v, u = np.mgrid[0:shape[0], 0:shape[1]].astype(np.float32)
    depth = 2.0 + 0.01 * u + 0.02 * v  # a tilted plane
    K = np.array([[150.0, 0, 70.3], [0, 140.0, 38.8], [0, 0, 1]], np.float32)
    mask = np.ones(shape, bool)
    mask[:, :5] = False
    return {"image": np.zeros((*shape, 3), np.uint8), "pointmap": back_project(depth, K), "mask": mask, "K": K}


@pytest.mark.parametrize("flip", [0.0, 1.0])
def test_pointmap_projects_to_its_pixel_after_scale_crop_flip(flip):
    sample = _pointmap_sample()
    augment = resolve_augment(dict(OFF, scale_prob=1.0, crop_prob=1.0, flip_prob=flip), dense_targets("pointmap"))
    transform = DenseTransform(SIZE, augment, maps=dense_targets("pointmap").maps)
    for seed in range(6):
        out = transform(sample, np.random.default_rng(seed))
        K, xyz, mask = out["K"].astype(np.float64), out["pointmap"].astype(np.float64), out["mask"]
        assert mask.sum() > 100 and K[0, 0] > 0
        u = K[0, 0] * xyz[..., 0] / np.where(mask, xyz[..., 2], 1) + K[0, 2]
        v = K[1, 1] * xyz[..., 1] / np.where(mask, xyz[..., 2], 1) + K[1, 2]
        rows, cols = np.nonzero(mask)
        tolerance = K[0, 0] / sample["K"][0, 0] + 0.5  # two nearest resamplings of the source pixels
        assert np.abs(u[mask] - cols).max() < tolerance and np.abs(v[mask] - rows).max() < tolerance, seed


def test_seg_pipeline_consistent_and_deterministic(dense_root):
    samples, _ = list_samples(dense_root, "train", dense_targets("seg"))
    dataset = DenseDataset(samples, dense_targets("seg"), SIZE, augment={"noise_prob": 1.0})
    a, b = dataset[(0, 7)], dataset[(0, 7)]
    assert torch.equal(a["image"], b["image"]) and torch.equal(a["labels"], b["labels"])  # bit-exact per key
    assert not torch.equal(dataset[(0, 8)]["image"], a["image"])
    # rotation corners are background (0) with black image, crop padding is ignore (255)
    seg = dense_targets("seg")
    transform = DenseTransform(SIZE, resolve_augment(dict(OFF, rotate_prob=1.0, background_prob=0.0), seg), maps=seg.maps)
    data = {"image": np.full((256, 192, 3), 200, np.uint8), "labels": np.full((256, 192), 3, np.uint8)}
    out = transform(data, np.random.default_rng(1))
    corner = out["labels"] == 0
    assert corner.sum() > 100 and (out["labels"][~corner] == 3).all()
    assert (out["image"][_erode(corner, 1)] == 0).all()  # (the edge pixels blend)
    small = {"image": np.full((100, 75, 3), 200, np.uint8), "labels": np.full((100, 75), 3, np.uint8)}
    crop = DenseTransform(SIZE, resolve_augment(dict(OFF, crop_prob=1.0, scale_prob=1.0, scale_range=(0.5, 0.5),
                                                     background_prob=0.0), seg), maps=seg.maps)
    out = crop(small, np.random.default_rng(0))  # half the input size: padded bottom / right, then stretched
    assert (out["labels"][:64, :48] == 3).all() and (out["labels"][64:] == 255).all()
    assert (out["labels"][:, 48:] == 255).all() and (out["image"][out["labels"] == 255] == 0).all()


@pytest.mark.parametrize("task", ["seg", "normal"])
def test_upstream_pipelines_flip_equivariant(dense_root, task):
    """Equal draws with flip_prob 0 and 1 give mirror images (noise off: its pattern is not mirrored)."""
    from datamodules.dense_dataset import load_sample
    from datamodules.dense.geometry import SAPIENS2_FLIP_CLASSES, check_flip_classes

    targets = dense_targets(task)
    data = load_sample(list_samples(dense_root, "train", targets)[0][2], targets, 29)
    extra = dict(rotate_prob=1.0) if task == "seg" else dict(crop_prob=1.0, scale_prob=1.0)
    plain, flipped = (DenseTransform(SIZE, resolve_augment(dict(extra, flip_prob=flip, noise_prob=0.0), targets),
                                     maps=targets.maps)(data, np.random.default_rng(5)) for flip in (0.0, 1.0))
    assert np.array_equal(flipped["image"][:, ::-1], plain["image"])
    if task == "seg":
        table = check_flip_classes(SAPIENS2_FLIP_CLASSES, 29)
        assert np.array_equal(flipped["labels"][:, ::-1], table[plain["labels"]])
    else:
        assert np.array_equal(flipped["mask"][:, ::-1], plain["mask"])
        np.testing.assert_allclose(flipped["normals"][:, ::-1] * [-1, 1, 1], plain["normals"], atol=1e-6)


def test_seg_pipeline_replaces_the_background_of_the_class_ids_it_is_declared():
    """A new background goes behind the pixels whose class id (the map its target spec declares ``classes``) is 0;
    the figure keeps one colour (its colours are matched to the new background as a whole)."""
    seg = dense_targets("seg")
    labels = np.zeros((128, 96), np.uint8)
    labels[30:100, 20:70] = 3
    sample = {"image": np.full((128, 96, 3), 200, np.uint8), "labels": labels}
    transform = DenseTransform(SIZE, resolve_augment(dict(OFF, background_prob=1.0), seg), maps=seg.maps)
    out = transform(sample, np.random.default_rng(0))
    figure = out["labels"] == 3
    assert figure.sum() == 70 * 50 and len(np.unique(out["image"][figure].reshape(-1, 3), axis=0)) == 1
    assert out["image"][~figure].reshape(-1, 3).std(0).max() > 5  # a new, varied background


def test_seg_crop_is_redrawn_while_one_class_dominates():
    labels = np.zeros((400, 300), np.uint8)
    labels[300:, 200:] = 7
    labels[330:, 240:] = 9
    pipeline = SegPipeline(resolve_augment(dict(background_prob=0.0), dense_targets("seg")), (100, 100), None,
                           dense_targets("seg").maps)
    good = 0
    for seed in range(20):
        y, x = pipeline.crop_offsets(labels.shape, labels, np.random.default_rng(seed))
        counts = np.bincount(labels[y:y + 100, x:x + 100].ravel())
        counts = counts[counts > 0]
        good += len(counts) > 1 and counts.max() / counts.sum() < 0.75
    assert good >= 10  # a random window has such a mix 5% of the time; up to 11 tries find one ~43% of the time


def test_image_ops_leave_targets_alone(dense_root):
    normal = dense_targets("normal")
    samples, _ = list_samples(dense_root, "train", normal)
    dataset = DenseDataset(samples, normal, SIZE, augment=dict(OFF, photometric_prob=1.0, downup_prob=1.0,
                                                               blur_prob=1.0, noise_prob=1.0, solarize_prob=1.0))
    plain = DenseDataset(samples, normal, SIZE)
    augmented, reference = dataset[(1, 0)], plain[1]
    assert torch.equal(augmented["normals"], reference["normals"]) and torch.equal(augmented["mask"], reference["mask"])
    assert not torch.equal(augmented["image"], reference["image"])


def test_validation_stretches_seg_and_letterboxes_the_others():
    square = {"image": np.full((50, 50, 3), 9, np.uint8), "labels": np.ones((50, 50), np.uint8),
              "mask": np.ones((50, 50), bool)}
    maps = dense_targets("seg").maps
    stretched = DenseTransform(SIZE, fit=validation_fit(None, dense_targets("seg")), maps=maps)(square)
    boxed = DenseTransform(SIZE, fit=validation_fit(None, dense_targets("normal")), maps=maps)(square)
    assert (stretched["labels"] == 1).all() and stretched["mask"].all()
    assert boxed["mask"].sum() == 96 * 96 and (boxed["labels"] == 255).sum() == 32 * 96


def test_background_replacement_matches_upstream_reinhard(tmp_path):
    rng = np.random.default_rng(0)
    image = rng.integers(0, 255, (40, 30, 3), dtype=np.uint8)
    background = rng.integers(0, 120, (40, 30, 3), dtype=np.uint8)
    labels = np.zeros((40, 30), np.uint8)
    labels[10:30, 8:22] = 5
    labels[12:14, 10:12] = 255  # ignore pixels keep their colour too (upstream keeps every label > 0)
    out = replace_background(image, labels, background)
    keep = labels > 0
    assert np.array_equal(out[~keep], background[~keep])
    # plain restatement: Lab statistics per channel over each region, the kept pixels moved onto the background's
    lab = cv2.cvtColor(np.where(keep[..., None], image, background).astype(np.uint8), cv2.COLOR_RGB2Lab)
    want = lab.astype(np.float64).copy()
    for c in range(3):
        fg, bg = lab[..., c][keep].astype(np.float64), lab[..., c][~keep].astype(np.float64)
        want[..., c] = np.abs((lab[..., c] - fg.mean()) * (bg.std() / fg.std()) + bg.mean())
    want = cv2.cvtColor(np.clip(np.round(want), 0, 255).astype(np.uint8), cv2.COLOR_Lab2RGB)
    assert np.abs(out[keep].astype(int) - want[keep]).max() <= 1
    assert np.abs(out[keep].astype(int) - image[keep]).mean() > 10  # the figure was recoloured
    wide, narrow = tmp_path / "a.jpg", tmp_path / "b.png"
    cv2.imwrite(str(wide), np.tile(np.arange(400, dtype=np.uint8)[None, :, None] // 2, (100, 1, 3)))
    cv2.imwrite(str(narrow), np.full((100, 10, 3), 50, np.uint8))
    source = BackgroundSource(tmp_path)
    picks = [source(np.random.default_rng(seed), 50, 50) for seed in range(6)]
    assert all(p.shape == (50, 50, 3) for p in picks)
    assert any(abs(int(p[0, 25, 0]) - 100) <= 2 for p in picks)  # centre column of the wide image
    assert BackgroundSource(None)(np.random.default_rng(0), 20, 10).dtype == np.uint8
    with pytest.raises(ValueError, match="data.augment.background_dir"):
        BackgroundSource(tmp_path / "missing")


def test_image_ops_follow_upstream_formulas():
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (64, 64, 3), dtype=np.uint8)
    assert np.array_equal(solarize(image), np.where(image > 128, 255 - image, image))
    noisy = gaussian_noise(np.full((200, 200, 3), 128, np.uint8), np.random.default_rng(1), var_range=(16.0, 16.0))
    assert abs(noisy.astype(float).std() - 4.0) < 0.1  # variance 16
    # scripted draws: brightness on, contrast last (mode 0), saturation off, hue off, contrast on
    draws = iter([1, 0, 0, 0, 1])

    class Scripted:
        def integers(self, *args):
            return next(draws)

        def uniform(self, low, high):
            return {(-32.0, 32.0): 10.0, (0.5, 1.5): 1.2}[(low, high)]

    got = photometric_distortion(image, Scripted())
    want = np.clip(np.clip(image.astype(np.float32) + 10.0, 0, 255).astype(np.uint8) * 1.2, 0, 255).astype(np.uint8)
    assert np.array_equal(got, want)


def _filter_item(**maps):
    return {key: torch.as_tensor(value) for key, value in maps.items()}


def test_filter_checks_follow_upstream_thresholds():
    """The valid-pixel checks are the filter's own; the others are the tasks' (their ``TargetSpec.checks``)."""
    f = DenseFilter()
    seg, pointmap_checks, albedo_checks = (dense_targets(t).checks for t in ("seg", "pointmap", "albedo"))
    labels = np.zeros((100, 100), np.uint8)
    labels[:9, :10] = 4  # 0.9% foreground
    assert f.reason(_filter_item(labels=labels), checks=seg)[0] == "min_foreground"
    assert f.reason(_filter_item(labels=labels)) is None  # not a check of the filter's own
    labels[9, :10] = 4  # 1.0%
    assert f.reason(_filter_item(labels=labels), checks=seg) is None
    mask = np.zeros((100, 100), bool)
    mask[0, :15] = True
    assert f.reason(_filter_item(mask=mask))[0] == "min_valid_pixels"
    mask[0, 15] = True
    assert f.reason(_filter_item(mask=mask)) is None
    mask[:] = True
    mask[:3, :] = False  # 97% coverage
    assert f.reason(_filter_item(mask=mask))[0] == "max_coverage"
    assert f.reason(_filter_item(mask=mask), has_mask_file=False) is None  # no mask file: all valid by choice
    mask[:5, :] = False  # 95%
    pointmap = np.ones((3, 100, 100), np.float32)
    pointmap[2, 50, 50] = 0.039
    assert f.reason(_filter_item(mask=mask, pointmap=pointmap), checks=pointmap_checks)[0] == "min_depth"
    pointmap[2, 50, 50] = 0.041
    assert f.reason(_filter_item(mask=mask, pointmap=pointmap), checks=pointmap_checks) is None
    albedo = np.full((3, 100, 100), 0.5, np.float32)
    albedo[0, ~mask] = 0.0  # off the mask: not counted
    albedo[1, 50:55, :] += 0.06  # std 0.013 in one channel, the others flat: one flat colour, left out
    assert f.reason(_filter_item(mask=mask, albedo=albedo), checks=albedo_checks)[0] == "min_albedo_std"
    albedo[2, 50:, :] = 0.45  # std 0.025
    assert f.reason(_filter_item(mask=mask, albedo=albedo), checks=albedo_checks) is None
    assert DenseFilter(max_coverage=1.0, min_valid_pixels=0).reason(_filter_item(mask=np.ones((4, 4), bool))) is None
    empty = _filter_item(mask=np.zeros((4, 4), bool), albedo=np.zeros((3, 4, 4), np.float32))
    assert DenseFilter(min_valid_pixels=0).reason(empty, checks=albedo_checks) is None  # no valid pixel to judge
    with pytest.raises(ValueError, match="data.filter: max_coverage"):
        DenseFilter(max_coverage=1.5)


def test_filtered_samples_are_replaced_and_counted(dense_root, tmp_path):
    root = tmp_path / "filtered"
    shutil.copytree(dense_root / "train", root / "train")
    shutil.copytree(dense_root / "val", root / "val")
    names = sorted(p.stem for p in (root / "train" / "images").iterdir())
    for split, name in (("train", names[0]), ("val", sorted((root / "val" / "images").iterdir())[0].stem)):
        path = root / split / "labels" / f"{name}.png"
        cv2.imwrite(str(path), np.zeros_like(cv2.imread(str(path), 0)))  # background only: no foreground
    dm = DenseTaskData("seg", root=str(root), input_size=SIZE, batch_size=2, num_workers=0,
                         augment=dict(OFF, background_prob=0.0))
    dm.setup("fit")
    item = dm.train_set[(0, 0)]
    assert item["filtered_samples"] == 1 and item["bad_samples_replaced"] == 0 and item["name"] == names[1]
    assert dm.train_set[(1, 0)]["filtered_samples"] == 0
    assert dm.val_set[0]["filtered_samples"] == 0  # validation is not filtered unless data.filter.val
    strict_val = DenseTaskData("seg", root=str(root), input_size=SIZE, num_workers=0, filter={"val": True})
    strict_val.setup("validate")
    assert strict_val.val_set[0]["filtered_samples"] == 1
    batch = next(iter(dm.train_dataloader()))
    assert batch["filtered_samples"].shape == (2,)
    strict = DenseDataset(dm.train_set.samples, dense_targets("seg"), SIZE, augment=dict(OFF, background_prob=0.0),
                          filter=DenseFilter(min_foreground=1.0))
    with pytest.raises(DataError, match=r"left out by data.filter.*min_foreground"):
        strict[(0, 0)]


def test_run_summary_counts_filtered_samples(tmp_path):
    from sapiens2_ft.training.callbacks.run_artifacts import RunArtifacts

    artifacts = RunArtifacts(tmp_path)
    artifacts.on_train_batch_end(None, None, None, {"filtered_samples": torch.tensor([1, 0, 2])}, 0)
    assert artifacts.filtered["train"] == 3 and artifacts.replaced["train"] == 0
    restored = RunArtifacts(tmp_path)
    restored.load_state_dict(artifacts.state_dict())
    assert restored.filtered == {"train": 3, "val": 0}


def test_camera_crop_window_fits_and_keeps_area():
    pipeline = CameraPipeline(resolve_augment({}, dense_targets("normal")), SIZE, None)
    windows = [pipeline.crop_window((200, 150), np.random.default_rng(seed)) for seed in range(20)]
    drawn = [w for w in windows if w is not None]
    assert len(drawn) >= 18  # 8 draws of area 0.4-1 and aspect 0.5-2: one fits in nearly every case
    for y, x, h, w in drawn:
        assert 0 <= y and y + h <= 200 and 0 <= x and x + w <= 150
        assert 0.38 <= h * w / (200 * 150) <= 1.0 and 0.45 <= w / h <= 2.1
    assert min(h * w for _, _, h, w in drawn) < 0.6 * 200 * 150 and len(set(drawn)) == len(drawn)


def test_camera_crop_shows_the_window_it_drew(monkeypatch):
    """With the crop alone, the output is the drawn window letterboxed: a coordinate image shows which pixels."""
    height, width = 200, 150
    v, u = np.mgrid[0:height, 0:width]
    image = np.stack([u + 50, v + 40, np.full_like(u, 255)], -1).astype(np.uint8)  # x + 50, y + 40; 0 is padding
    pipeline = CameraPipeline(resolve_augment(dict(OFF, crop_prob=1.0), dense_targets("normal")), SIZE, None)
    drawn = []
    original = CameraPipeline.crop_window
    monkeypatch.setattr(CameraPipeline, "crop_window", lambda self, *a: drawn.append(original(self, *a)) or drawn[-1])
    for seed in range(4):
        out = pipeline({"image": image}, np.random.default_rng(seed))["image"].astype(int)
        y, x, h, w = drawn[-1]
        assert h * w < height * width
        content = out[..., 2] > 250  # pixels wholly inside the window (padding and the edge blend are darker)
        xs, ys = out[..., 0][content] - 50, out[..., 1][content] - 40
        assert abs(xs.min() - x) <= 1 and abs(xs.max() - (x + w - 1)) <= 1, (seed, drawn[-1])
        assert abs(ys.min() - y) <= 1 and abs(ys.max() - (y + h - 1)) <= 1, (seed, drawn[-1])


def test_stretch_matrix_maps_pixel_edges_to_pixel_edges():
    """Edges scale: the centre c of a source pixel lands on s (c + 0.5) - 0.5, per axis."""
    from datamodules.dense.geometry import stretch_matrix

    matrix = stretch_matrix((4, 6), (8, 3))  # y x 2, x x 0.5
    np.testing.assert_allclose(matrix @ [0.0, 0.0, 1.0], [0.5 * 0.5 - 0.5, 2 * 0.5 - 0.5])
    np.testing.assert_allclose(matrix @ [5.0, 3.0, 1.0], [0.5 * 5.5 - 0.5, 2 * 3.5 - 0.5])


@pytest.mark.parametrize("axis", [0, 1])
def test_a_strong_downscale_is_prefiltered(axis):
    """Stripes of a 5 px period, shrunk 4x: prefiltered they fade to grey (std 17); unfiltered along either axis
    (or with a 2 / 3 narrower Gaussian) they alias into stripes (std 41-95)."""
    from datamodules.dense.geometry import scale_offset_matrix

    stripes = (255 * (np.sin(2 * np.pi * np.arange(64) / 5) > 0)).astype(np.uint8)
    image = np.repeat(np.repeat(stripes[None, :, None], 64, 0), 3, 2)
    image = image if axis == 1 else image.transpose(1, 0, 2).copy()
    out = warp_sample({"image": image}, scale_offset_matrix(0.25, 0.0, 0.0), (16, 16))["image"]
    assert out[2:-2, 2:-2].std() < 25


def test_warped_normals_keep_blends_of_near_normals_and_masks_follow_depth():
    """A half-pixel shift averages neighbours: normals 90 degrees apart blend to a unit normal between them (length
    0.71 before renormalising: kept), opposite ones to nothing (length 0: zero vector, mask off); the mask also
    drops pixels without depth."""
    from datamodules.dense.geometry import scale_offset_matrix

    normals = np.zeros((2, 6, 3), np.float32)
    normals[:, :2] = (1, 0, 0)
    normals[:, 2:4] = (0, 0, -1)
    normals[:, 4:] = (0, 0, 1)
    depth = np.array([[0.5, 0.5, 2.0, 0.0, 3.0, 3.0]] * 2, np.float32)
    sample = {"image": np.zeros((2, 6, 3), np.uint8), "normals": normals, "mask": np.ones((2, 6), bool),
              "depth": depth}
    maps = {**dense_targets("normal").maps, **dense_targets("pointmap").maps}
    out = warp_sample(sample, scale_offset_matrix(1.0, -0.5, 0.0), (2, 5), maps=maps)  # x samples source x + 0.5
    np.testing.assert_allclose(out["normals"][0, 1], [2**-0.5, 0.0, -(2**-0.5)], atol=1e-6)
    assert np.array_equal(out["normals"][0, 3], [0.0, 0.0, 0.0])
    assert out["mask"][0].tolist() == [True, True, False, False, True]  # depth 0.5 counts, 0 and the blend do not


def test_a_map_of_an_unknown_kind_is_an_error_not_left_unwarped():
    """A new task's target map without a warp rule would stay put while the image moves: warp_sample refuses it,
    naming it and the kinds it knows; values that are not maps of the image's size pass unchanged."""
    from datamodules.dense.geometry import scale_offset_matrix, warp_sample
    from datamodules.dense.maps import VALUES, MapRule

    rng = np.random.default_rng(0)
    sample = {"image": rng.integers(0, 256, (20, 16, 3), dtype=np.uint8), "shading": rng.random((20, 16, 3)),
              "K": np.eye(3), "meta": np.arange(4)}
    with pytest.raises(ValueError, match=r"'shading' \(20, 16, 3\).*the maps it warps: image, mask, alpha \("):
        warp_sample(sample, scale_offset_matrix(0.5, 0.0, 0.0), (10, 8), maps={"alpha": VALUES})
    # Its task's target spec declares its rule (TargetSpec.maps): then it moves with the image.
    declared = warp_sample(sample, scale_offset_matrix(0.5, 0.0, 0.0), (10, 8), maps={"shading": VALUES})
    assert declared["shading"].shape == (10, 8, 3)
    with pytest.raises(ValueError, match=r"unknown warps \{'shading': 'cubic'\}"):
        warp_sample(sample, scale_offset_matrix(0.5, 0.0, 0.0), (10, 8), maps={"shading": MapRule("cubic")})
    del sample["shading"]
    out = warp_sample(sample, scale_offset_matrix(0.5, 0.0, 0.0), (10, 8))
    assert out["image"].shape == (10, 8, 3) and out["meta"] is sample["meta"]
