"""Dense-task files, transforms, dataset and DataModule on a tiny synthetic dataset."""

from __future__ import annotations

import re
import shutil

import cv2
import numpy as np
import pytest
import torch

from datamodules.dense.augment import DenseAugment
from datamodules.dense.files import list_samples
from datamodules.dense_dataset import DenseDataset, load_sample
from datamodules.errors import DataError
from datamodules.dense.geometry import (SAPIENS2_FLIP_CLASSES, back_project, canonical_pointmap, check_flip_classes,
                                        flip_sample)
from datamodules.dense.transforms import DenseTransform
from sapiens2_ft.tasks.dense_data import DenseTaskData, dense_targets

SIZE = (128, 96)
NO_PHOTO = dict(photometric_prob=0.0, blur_prob=0.0, dropout_prob=0.0)


@pytest.mark.parametrize("task,keys", [
    ("seg", {"labels": (torch.int64, SIZE)}),
    ("normal", {"normals": (torch.float32, (3, *SIZE)), "mask": (torch.bool, SIZE)}),
    ("pointmap", {"pointmap": (torch.float32, (3, *SIZE)), "mask": (torch.bool, SIZE),
                  "scale": (torch.float32, ()), "intrinsics": (torch.float32, (3, 3))}),
    ("matting", {"alpha": (torch.float32, (1, *SIZE)), "foreground": (torch.float32, (3, *SIZE)),
                 "has_foreground": (torch.bool, ())}),
    ("albedo", {"albedo": (torch.float32, (3, *SIZE)), "mask": (torch.bool, SIZE)}),
])
def test_batches_per_task(dense_root, task, keys):
    dm = DenseTaskData(task, root=str(dense_root), input_size=SIZE, batch_size=2, num_workers=0,
                         augment={"flip_prob": 0.5})
    assert isinstance(dm.augment, DenseAugment)
    dm.setup("fit")
    for loader in (dm.train_dataloader(), dm.val_dataloader()):
        batch = next(iter(loader))
        assert batch["image"].dtype == torch.uint8 and batch["image"].shape == (2, 3, *SIZE)
        assert len(batch["name"]) == 2
        for key, (dtype, shape) in keys.items():
            assert batch[key].dtype == dtype and batch[key].shape == (2, *shape), key
    if task == "seg":
        values = set(batch["labels"].unique().tolist())
        assert values <= set(range(29)) | {255}
    if task == "normal":
        norm = batch["normals"].norm(dim=1)[batch["mask"]]
        assert torch.allclose(norm, torch.ones_like(norm), atol=1e-4)
    if task == "matting":
        assert 0 <= batch["alpha"].min() and batch["alpha"].max() <= 1
    if task == "albedo":  # letterboxed validation: the renderer's colours on the figures, 0 off them
        assert 0 <= batch["albedo"].min() and batch["albedo"].max() <= 1
        assert (batch["albedo"].amax(1)[batch["mask"]] > 0).float().mean() > 0.99
        assert (batch["albedo"].permute(0, 2, 3, 1)[~batch["mask"]] == 0).all(1).float().mean() > 0.95


def test_albedo_training_follows_upstreams_albedo_recipe():
    """Upstream's albedo pipeline: scale / crop / flip 0.3 and letterbox as for normals, noise 0.2, no colour
    distortion, down/up-sampling, blur or solarize."""
    from datamodules.dense.augment import resolve_augment

    a = resolve_augment({}, dense_targets("albedo"))
    assert (a.pipeline, a.flip_prob, a.scale_prob, a.crop_prob, a.noise_prob) == ("camera", 0.3, 0.3, 0.3, 0.2)
    assert (a.photometric_prob, a.downup_prob, a.blur_prob, a.solarize_prob, a.rotate_prob) == (0, 0, 0, 0, 0)


def test_flip_classes_sapiens2():
    expected = list(range(29))
    for left in range(5, 13):
        expected[left], expected[left + 9] = left + 9, left
    assert SAPIENS2_FLIP_CLASSES == expected
    with pytest.raises(ValueError, match="dense/geometry.py"):
        check_flip_classes([0, 0, 1], 3)


def _pair(dense_root, task):
    """The same augmented sample without and with a flip (equal random draws)."""
    samples, _ = list_samples(dense_root, "train", dense_targets(task))
    data = load_sample(samples[0], dense_targets(task), 29)
    out = []
    for flip in (0.0, 1.0):
        t = DenseTransform(SIZE, DenseAugment(flip_prob=flip, scale_range=(0.9, 1.4), **NO_PHOTO),
                           maps=dense_targets(task).maps)
        out.append(t(data, np.random.default_rng(3)))
    return out


def test_flip_equivariance_seg_normals_matting(dense_root):
    table = check_flip_classes(SAPIENS2_FLIP_CLASSES, 29)
    plain, flipped = _pair(dense_root, "seg")
    assert (flipped["labels"] != flipped["labels"][:, ::-1]).any()
    np.testing.assert_array_equal(flipped["labels"][:, ::-1], table[plain["labels"]])
    assert np.isin(plain["labels"], [*range(5, 13), *range(14, 22)]).any()
    back = flip_sample(flipped, table, dense_targets("seg").maps)
    np.testing.assert_array_equal(back["labels"], plain["labels"])
    np.testing.assert_array_equal(back["image"], plain["image"])
    plain, flipped = _pair(dense_root, "normal")
    np.testing.assert_allclose(flipped["normals"][:, ::-1, 0], -plain["normals"][..., 0], atol=1e-6)
    back = flip_sample(flipped, maps=dense_targets("normal").maps)
    np.testing.assert_allclose(back["normals"], plain["normals"], atol=1e-6)
    np.testing.assert_array_equal(back["mask"], plain["mask"])
    plain, flipped = _pair(dense_root, "matting")
    back = flip_sample(flipped, maps=dense_targets("matting").maps)
    np.testing.assert_array_equal(back["alpha"], plain["alpha"])
    np.testing.assert_array_equal(back["foreground"], plain["foreground"])
    plain, flipped = _pair(dense_root, "albedo")  # mirrored only: a colour has no direction
    back = flip_sample(flipped, maps=dense_targets("albedo").maps)
    np.testing.assert_array_equal(back["albedo"], plain["albedo"])
    np.testing.assert_array_equal(back["mask"], plain["mask"])


def test_flip_equivariance_pointmap(dense_root):
    plain, flipped = _pair(dense_root, "pointmap")
    width = SIZE[1]
    assert flipped["K"][0, 2] == pytest.approx(width - 1 - plain["K"][0, 2])
    mask = plain["mask"]
    original = back_project(plain["depth"], plain["K"])
    mirrored = back_project(flipped["depth"], flipped["K"])[:, ::-1] * np.array([-1, 1, 1], np.float32)
    assert mask.any()
    np.testing.assert_allclose(mirrored[mask], original[mask], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(flipped["mask"][:, ::-1], mask)


def test_resize_nearest_labels_and_intrinsics():
    h, w = 60, 80
    K = np.array([[100.0, 0, 39.5], [0, 100.0, 29.5], [0, 0, 1]], np.float32)
    point = np.array([0.3, -0.2, 2.0])
    u, v = (K @ point)[:2] / point[2]
    labels = np.zeros((h, w), np.uint8)
    labels[h // 2:, :] = 7
    col, row = int(round(u)), int(round(v))  # (54, 20): the point projects to the pixel's edge (54.5, 19.5)
    labels[row, col] = 21
    data = {"image": np.zeros((h, w, 3), np.uint8), "labels": labels, "K": K,
            "depth": np.full((h, w), 2.0, np.float32), "mask": np.ones((h, w), bool)}
    for size in ((150, 200), (37, 50), (64, 48)):
        out = DenseTransform(size, maps={**dense_targets("seg").maps, **dense_targets("pointmap").maps})(data)
        assert set(np.unique(out["labels"]).tolist()) <= {0, 7, 21, 255}
        scale = min(size[0] / h, size[1] / w)
        assert out["K"][0, 0] == pytest.approx(100 * scale)
        u2, v2 = (out["K"].astype(np.float64) @ point)[:2] / point[2]
        # where K' puts the marked pixel's centre: the point's projection moved by the pixel's offset, scaled
        cu, cv = u2 + scale * (col - u), v2 + scale * (row - v)
        rows, cols = np.nonzero(out["labels"] == 21)
        if scale > 1:  # an upscale draws the pixel as a block: every output pixel within half a block of it
            assert rows.size and np.all(np.abs(cols - cu) <= 0.5 * scale) and np.all(np.abs(rows - cv) <= 0.5 * scale)
            assert rows.size == len(np.unique(rows)) * len(np.unique(cols))
            assert len(np.unique(cols)) >= int(scale) and len(np.unique(rows)) >= int(scale)
        elif rows.size:  # a downscale keeps it only where it is an output pixel's nearest source pixel
            assert np.all(np.abs(cols - cu) <= 0.5 * scale + 0.5) and np.all(np.abs(rows - cv) <= 0.5 * scale + 0.5)


def test_canonical_pointmap():
    """As upstream: X, Y and Z all times scale = 768 / fx; the image's K still projects each point to its pixel."""
    K = np.array([[384.0, 0, 50], [0, 400.0, 40], [0, 0, 1]], np.float32)
    depth = 3.0 + np.random.default_rng(0).random((80, 100)).astype(np.float32)
    xyz, scale = canonical_pointmap(depth, K)
    assert scale == pytest.approx(2.0)
    camera = back_project(depth, K)
    np.testing.assert_allclose(xyz, camera * scale, rtol=1e-6)
    u = K[0, 0] * xyz[..., 0] / xyz[..., 2] + K[0, 2]
    v = K[1, 1] * xyz[..., 1] / xyz[..., 2] + K[1, 2]
    np.testing.assert_allclose(u, np.broadcast_to(np.arange(100, dtype=np.float32), u.shape), atol=1e-3)
    np.testing.assert_allclose(v, np.broadcast_to(np.arange(80, dtype=np.float32)[:, None], v.shape), atol=1e-3)
    same, _ = canonical_pointmap(camera, K)  # an HxWx3 camera pointmap is rescaled the same way
    np.testing.assert_array_equal(same, xyz)


def _broken(dense_root, tmp_path, task, break_fn):
    root = tmp_path / "broken"
    shutil.copytree(dense_root / "val", root / "val")
    name = sorted(p.stem for p in (root / "val" / "images").iterdir())[0]
    path = break_fn(root / "val", name)
    samples, _ = list_samples(root, "val", dense_targets(task))
    with pytest.raises(DataError, match=re.escape(str(path))):
        DenseDataset(samples, dense_targets(task), SIZE)[0]


def _write_png(path, array):
    cv2.imwrite(str(path), array)
    return path


@pytest.mark.parametrize("task,break_fn", [
    ("seg", lambda d, n: _write_png(d / "labels" / f"{n}.png", np.zeros((10, 10), np.uint8))),
    ("seg", lambda d, n: _write_png(d / "labels" / f"{n}.png",
                                    np.full(cv2.imread(str(d / "labels" / f"{n}.png"), 0).shape, 77, np.uint8))),
    ("normal", lambda d, n: _nan_normals(d / "normals" / f"{n}.npy")),
    ("pointmap", lambda d, n: _zero_depth(d, n)),
    ("pointmap", lambda d, n: _write_text(d / "intrinsics" / f"{n}.txt", "1 0 2\n0 1 3\n")),
    ("albedo", lambda d, n: _write_png(d / "albedo" / f"{n}.png", cv2.imread(str(d / "albedo" / f"{n}.png"), 0))),
], ids=["size-mismatch", "label-77", "nan-normal", "zero-depth", "intrinsics-2x3", "grey-albedo"])
def test_bad_targets_name_the_file(dense_root, tmp_path, task, break_fn):
    _broken(dense_root, tmp_path, task, break_fn)


def _nan_normals(path):
    normals = np.load(path)
    normals[0, 0] = np.nan
    np.save(path, normals)
    return path


def _zero_depth(split_dir, name):
    path = split_dir / "depth" / f"{name}.npy"
    depth = np.load(path)
    mask = cv2.imread(str(split_dir / "masks" / f"{name}.png"), 0) > 127
    depth[mask] = 0
    np.save(path, depth)
    return path


def _write_text(path, text):
    path.write_text(text)
    return path


def test_missing_target_file(dense_root, tmp_path):
    root = tmp_path / "missing"
    shutil.copytree(dense_root / "val", root / "val")
    path = sorted((root / "val" / "alpha").iterdir())[0]
    path.unlink()
    with pytest.raises(DataError, match=re.escape(str(path))):
        list_samples(root, "val", dense_targets("matting"))
    samples, skipped = list_samples(root, "val", dense_targets("matting"), on_bad_sample="skip")
    assert skipped["missing target file"] == 1 and path.stem not in [s.name for s in samples]


def test_pointmap_files_without_intrinsics(dense_root, tmp_path):
    root = tmp_path / "pointmaps"
    shutil.copytree(dense_root / "val", root / "val")
    split = root / "val"
    (split / "pointmaps").mkdir()
    for path in sorted((split / "depth").iterdir()):
        K = np.loadtxt(split / "intrinsics" / f"{path.stem}.txt")
        np.save(split / "pointmaps" / path.name, back_project(np.load(path), K))
    pointmap = dense_targets("pointmap")
    reference = DenseDataset(list_samples(root, "val", pointmap)[0], pointmap, SIZE)[0]
    shutil.rmtree(split / "depth")
    shutil.rmtree(split / "intrinsics")
    item = DenseDataset(list_samples(root, "val", pointmap)[0], pointmap, SIZE)[0]
    torch.testing.assert_close(item["intrinsics"], reference["intrinsics"], rtol=1e-3, atol=1e-2)
    mask = item["mask"]
    assert torch.equal(mask, reference["mask"])
    # Z is the same nearest sample; X, Y of a pointmap file stay those of the source pixel (within half of one,
    # 0.02 m here, times the canonical scale)
    got, want = item["pointmap"][:, mask], reference["pointmap"][:, mask]
    torch.testing.assert_close(got[2], want[2], rtol=1e-3, atol=1e-4)
    assert (got[:2] - want[:2]).abs().max() < 0.02 * float(item["scale"])


def test_epoch_seeded_sampler_orders_shards_and_skips():
    from datamodules.loaders import EpochSeededSampler, sample_rng

    order = [i for i, _ in EpochSeededSampler(10, seed=3)]
    assert sorted(order) == list(range(10)) and order == [i for i, _ in EpochSeededSampler(10, seed=3)]
    later = EpochSeededSampler(10, seed=3)
    later.set_epoch(1)
    assert [i for i, _ in later] != order  # a new order every epoch
    shards = [[i for i, _ in EpochSeededSampler(10, seed=3, rank=r, world_size=3)] for r in range(3)]
    assert all(len(s) == 3 for s in shards) and not set(shards[0]) & set(shards[1])
    assert [s[k] for k in range(3) for s in shards] == order[:9]  # every 3rd position of the same order
    resumed = EpochSeededSampler(10, seed=3)
    resumed.skip(4)
    assert [i for i, _ in resumed] == order[4:] and [i for i, _ in resumed] == order  # skips one pass only
    (_, key_a), (_, key_b) = list(EpochSeededSampler(10, seed=3))[:2]
    assert sample_rng((5, key_a))[1].random() == sample_rng((5, key_b))[1].random()  # same sample, same draws
    assert sample_rng((5, key_a))[1].random() != sample_rng((6, key_a))[1].random()


def test_validation_shards_cover_every_sample_once_and_mark_the_repeats(dense_root):
    from datamodules.loaders import PaddingKey, ValShardSampler

    shards = [list(ValShardSampler(5, rank, 3)) for rank in range(3)]
    assert shards == [[0, 3], [1, 4], [2, PaddingKey(0)]]  # same length everywhere; the filler is marked
    dataset = DenseDataset(list_samples(dense_root, "val", dense_targets("seg"))[0], dense_targets("seg"), SIZE, 29)
    real, repeat = dataset[0], dataset[PaddingKey(0)]
    assert not real["padding"] and repeat["padding"] and repeat["name"] == real["name"]
    assert torch.equal(torch.as_tensor(repeat["labels"]), torch.as_tensor(real["labels"]))


def test_replacing_bad_samples_gives_up_when_the_data_is_gone():
    from datamodules.loaders import MAX_REPLACEMENTS, replace_bad_samples

    calls = []

    def load(i):
        calls.append(i)
        if i != 3:
            raise DataError(f"cannot read sample {i}")
        return {"index": i}

    assert replace_bad_samples(load, 1, 1000, "skip") == {"index": 3, "bad_samples_replaced": 2, "filtered_samples": 0}
    calls.clear()
    with pytest.raises(DataError, match="17 samples in a row are unusable .* last: cannot read sample -20"):
        replace_bad_samples(lambda i: load(-i), 4, 1000, "skip")
    assert len(calls) == MAX_REPLACEMENTS + 1  # not all 1000
