"""The data-check sheet: ``check_data --show N`` and the one every training run writes (``data_check.png``).

Samples come from the synthetic demo data (the demos' renderer, 8 images: ``dense_root``) through the demo
recipes; the expected pictures are derived from the dataset items, read apart from the sheet's own loading.
"""

from __future__ import annotations

import dataclasses
import math
from types import SimpleNamespace

import cv2
import numpy as np
import pytest
import torch
from conftest import pose_run_args
from wandb_records import logged_keys

from sapiens2_ft import check_data
from sapiens2_ft.models.preprocessing import normalize_images
from sapiens2_ft.tasks.dense_data import DenseTaskData
from sapiens2_ft.tasks.pose.draw import LEFT, RIGHT, SIDE_COLORS
from sapiens2_ft.tasks.sample_pictures import display_image
from sapiens2_ft.tasks.sample_sheet import GAP, SHEET_FILE, data_sheet, sheet_labels
from sapiens2_ft.tasks.visualize import CAPTION_HEIGHT, checkerboard, palette
from sapiens2_ft.training.callbacks.data_sheet import DataSheet
from sapiens2_ft.training.cli import main as train_main, resolve_config_args, task_of

H, W = 256, 192  # the demo recipes' input size: tiles at scale 1


def _args(config, root, out, show, batch_size=4):
    return ["--config", config, "--data.root", str(root), "--data.synthetic", "null", "--data.num_workers", "0",
            "--data.batch_size", str(batch_size), "--show", str(show), "--out", str(out)]


def _dataset_items(args, count):
    """The first ``count`` items of the recipe's training order, straight from the dataset (no collate)."""
    argv = resolve_config_args(args)
    cli = check_data.DataCheckCLI(task_of(argv), args=argv, run=False, seed_everything_default=0,
                                  auto_configure_optimizers=False)
    data = cli.datamodule
    data.setup("fit")
    loader = data.train_dataloader()
    keys = [key for _, key in zip(range(count), iter(loader.sampler))]
    return data, [loader.dataset[key] for key in keys]


def _tile(png, n, t, columns, tiles_per_cell):
    """Tile ``t`` of sample ``n`` cut from the sheet by its layout: cells of tiles under caption strips."""
    y = (n // columns) * (CAPTION_HEIGHT + H + GAP) + CAPTION_HEIGHT
    x = (n % columns) * (tiles_per_cell * W + GAP) + t * W
    return png[y:y + H, x:x + W]


def _drawn(item, skeleton):
    """Where keypoints and links of a sample may be drawn (generously): everything else is the crop itself."""
    mask = np.zeros((H, W), np.uint8)
    points, shown = item["keypoints"].numpy(), item["keypoint_weights"].numpy() > 0
    at = [tuple(int(round(v)) for v in p) for p in points]
    for a, b in skeleton:
        if shown[a] and shown[b]:
            cv2.line(mask, at[a], at[b], 1, 5)
    for k in np.flatnonzero(shown):
        cv2.circle(mask, at[k], 7, 1, -1)
    return mask.astype(bool)


def test_pose_sheet_shows_the_training_crops_and_a_flipped_copy(dense_root, tmp_path, capsys):
    args = _args("pose_demo.yaml", dense_root, tmp_path, show=6)
    assert check_data.main(args) == 0
    assert f"data sheet of 6 augmented training samples: {tmp_path / SHEET_FILE}" in capsys.readouterr().out
    png = cv2.imread(str(tmp_path / SHEET_FILE))[..., ::-1]
    columns, rows = 3, 2  # 6 samples, as square as it goes; a cell = crop + flipped copy
    assert png.shape == (rows * (CAPTION_HEIGHT + H) + (rows - 1) * GAP + CAPTION_HEIGHT,  # + the side key
                         columns * 2 * W + (columns - 1) * GAP, 3)
    data, items = _dataset_items(args, 6)
    for n, item in enumerate(items):
        crop = item["image"].permute(1, 2, 0).numpy()
        drawn = _drawn(item, data.metainfo.skeleton)  # COCO-17's skeleton is its own mirror image
        tile, flipped = _tile(png, n, 0, columns, 2), _tile(png, n, 1, columns, 2)
        assert drawn.mean() < 0.5 and item["keypoint_weights"].sum() > 0
        assert np.array_equal(tile[~drawn], crop[~drawn]), f"sample {n}: not the training crop"
        assert np.array_equal(flipped[:, ::-1][~drawn], crop[~drawn]), f"sample {n}: not the mirrored crop"
        assert not np.array_equal(tile[drawn], crop[drawn])  # the targets are drawn on it


def _isolated_pairs(item, names, flip, radius=12):
    """(left keypoint j, its partner r), both labelled, each ``radius`` px from every other labelled keypoint
    (the mirror image keeps the distances)."""
    points, shown = item["keypoints"].numpy(), item["keypoint_weights"].numpy() > 0

    def alone(k):
        others = [i for i in np.flatnonzero(shown) if i != k]
        return np.linalg.norm(points[others] - points[k], axis=1).min() > radius

    for j, name in enumerate(names):
        r = flip[j]
        if name.startswith("left_") and shown[j] and shown[r] and alone(j) and alone(r):
            yield j, r, points[j], (W - 1 - points[r][0], points[r][1])


def test_left_keypoints_keep_their_colour_in_the_flipped_copy_unless_a_pair_is_swapped(dense_root, tmp_path):
    data, items = _dataset_items(_args("pose_demo.yaml", dense_root, tmp_path, show=8, batch_size=8), 8)
    labels = sheet_labels(data)
    names, flip = labels.metainfo.keypoint_names, labels.metainfo.flip_indices
    broken = dataclasses.replace(labels, metainfo=dataclasses.replace(
        labels.metainfo, flip_indices=tuple(range(len(names)))))  # every flip pair lost
    sheet, swapped = data_sheet("pose", items, labels), data_sheet("pose", items, broken)
    checked = 0
    for n, item in enumerate(items):
        (x0, y0, _, _), (x1, y1, _, _) = sheet.boxes[n]
        for j, r, at_j, mirrored_r in _isolated_pairs(item, names, flip):
            ox, oy = (int(round(v)) for v in at_j)
            fx, fy = (int(round(v)) for v in mirrored_r)  # where the partner's joint lands in the mirror image
            assert tuple(sheet.picture[y0 + oy, x0 + ox]) == SIDE_COLORS[LEFT], (n, names[j])
            # mirrored, the right limb shows where the left one was: its flip pair labels it left
            assert tuple(sheet.picture[y1 + fy, x1 + fx]) == SIDE_COLORS[LEFT], (n, names[j])
            assert tuple(swapped.picture[y1 + fy, x1 + fx]) == SIDE_COLORS[RIGHT], (n, names[r])
            checked += 1
    assert checked >= 4, "too few isolated left/right pairs to check"


def test_seg_sheet_has_the_images_and_a_legend_of_the_classes_present(dense_root, tmp_path, capsys):
    args = _args("seg_demo.yaml", dense_root, tmp_path, show=4, batch_size=2)
    assert check_data.main(args) == 0
    png = cv2.imread(str(tmp_path / SHEET_FILE))[..., ::-1]
    data, items = _dataset_items(args, 4)
    present = sorted(set().union(*({int(c) for c in np.unique(i["labels"]) if 0 < c < 29} for i in items)))
    assert len(present) >= 5
    grid_height = 2 * (CAPTION_HEIGHT + H) + GAP
    assert png.shape[:2] == (grid_height + 18 * math.ceil(len(present) / ((2 * 2 * W + GAP) // 150)) + 4,
                             2 * 2 * W + GAP)
    legend = png[grid_height:].reshape(-1, 3)
    colors = palette(29)
    for c in present:  # each class present has its swatch; the others none
        assert (legend == colors[c]).all(axis=1).sum() >= 9 * 13, data.class_names[c]
    for c in set(range(1, 29)) - set(present):
        assert not (legend == colors[c]).all(axis=1).any(), data.class_names[c]
    assert data_sheet("seg", items, sheet_labels(data)).classes == present
    for n, item in enumerate(items):
        image, labels = item["image"].permute(1, 2, 0).numpy(), item["labels"].numpy()
        assert np.array_equal(_tile(png, n, 0, 2, 2), image)
        overlay = _tile(png, n, 1, 2, 2).astype(int)
        assert np.array_equal(overlay[labels == 0], image[labels == 0])  # background shows the image
        parts = (labels > 0) & (labels < 29)
        tinted = np.abs(overlay[parts] - colors[labels[parts]]).sum(1)
        assert (tinted < np.abs(image[parts].astype(int) - colors[labels[parts]]).sum(1)).mean() > 0.95


@pytest.mark.parametrize("task", ["normal", "matting", "pointmap"])
def test_dense_target_pictures(dense_root, task):
    data = DenseTaskData(task, root=str(dense_root), input_size=(H, W), batch_size=2, num_workers=0)
    data.setup("fit")
    items = [data.train_set[(i, 7)] for i in range(3)]
    sheet = data_sheet(task, items, sheet_labels(data))
    assert sheet.picture.shape == (2 * (CAPTION_HEIGHT + H) + GAP, 2 * 2 * W + GAP, 3) and sheet.factor == 1
    for n, item in enumerate(items):
        (xi, yi, _, _), (x, y, w, h) = sheet.boxes[n]
        assert np.array_equal(sheet.picture[yi:yi + h, xi:xi + w], item["image"].permute(1, 2, 0).numpy())
        target = sheet.picture[y:y + h, x:x + w].astype(float)
        if task == "matting":  # the image cut out by its alpha, over a checkerboard
            alpha = item["alpha"][0].numpy()[..., None]
            expected = alpha * item["image"].permute(1, 2, 0).numpy() + (1 - alpha) * checkerboard(h, w)
            assert np.abs(target - expected).max() <= 0.5 and 0.02 < (alpha > 0.5).mean() < 0.98
            continue
        mask = item["mask"].numpy().reshape(h, w).astype(bool)
        assert mask.mean() > 0.02 and (target[~mask] == 0).all()  # outside the person: black
        if task == "normal":  # RGB = (n + 1) / 2
            expected = (item["normals"].permute(1, 2, 0).numpy() + 1) * 127.5
            assert np.abs(target[mask] - expected[mask]).max() <= 1
        else:  # turbo, near = red: the nearest tenth of the person redder than the farthest tenth
            z = item["pointmap"][2].numpy()[mask]
            red_minus_blue = target[mask][:, 0] - target[mask][:, 2]
            near, far = z <= np.quantile(z, 0.1), z >= np.quantile(z, 0.9)
            assert red_minus_blue[near].mean() > red_minus_blue[far].mean() + 50


def test_a_normalised_image_is_shown_as_the_input_it_came_from():
    image = torch.randint(0, 256, (1, 3, 8, 6), dtype=torch.uint8)
    assert np.array_equal(display_image(normalize_images(image)[0]), image[0].permute(1, 2, 0).numpy())


def test_the_callback_draws_once_on_rank_0_and_keeps_the_sheet_of_a_resumed_run(dense_root, tmp_path):
    data = DenseTaskData("normal", root=str(dense_root), input_size=(H, W), batch_size=2, num_workers=0)
    data.setup("fit")
    batch = next(iter(data.train_dataloader()))
    module = SimpleNamespace(task="normal")

    def trainer(step, rank):
        return SimpleNamespace(global_step=step, is_global_zero=rank == 0, datamodule=data, loggers=[])

    path = tmp_path / SHEET_FILE
    DataSheet(tmp_path).on_train_batch_start(trainer(0, 1), module, batch, 0)
    assert not path.exists()  # rank 1 draws nothing
    callback = DataSheet(tmp_path)
    callback.on_train_batch_start(trainer(0, 0), module, batch, 0)
    first = path.read_bytes()
    path.unlink()
    callback.on_train_batch_start(trainer(1, 0), module, batch, 1)
    assert not path.exists()  # once per run
    path.write_bytes(first)
    DataSheet(tmp_path).on_train_batch_start(trainer(7, 0), module, {**batch, "image": batch["image"] * 0}, 0)
    assert path.read_bytes() == first  # resumed: the sheet of the run's start stays
    DataSheet(tmp_path).on_train_batch_start(trainer(0, 0), SimpleNamespace(task="multitask"), batch, 0)
    assert path.read_bytes() == first  # a task without a sheet


@pytest.mark.slow  # a training run: the fast tier keeps this file's unit tests
def test_a_short_training_run_writes_the_sheet_of_its_first_batch(tiny_coco, tiny_pose308_dir, tmp_path):
    run_dir = tmp_path / "run"
    train_main(pose_run_args(tiny_coco, tiny_pose308_dir, run_dir, 2))
    sheet = cv2.imread(str(run_dir / SHEET_FILE))
    assert sheet.shape == (CAPTION_HEIGHT + H + CAPTION_HEIGHT, 2 * 2 * W + GAP, 3)  # batch size 2, one row
    (wandb_run,) = (run_dir / "wandb").glob("offline-run-*")
    _, history = logged_keys(next(wandb_run.glob("run-*.wandb")))
    assert "train/data_check/filenames" in history  # the dashboard's image panel
    (logged,) = (wandb_run / "files" / "media" / "images" / "train").glob("data_check_*.png")
    assert np.array_equal(cv2.imread(str(logged)), sheet)


@pytest.mark.slow  # a training run
def test_a_run_with_no_data_sheet_draws_none(tiny_coco, tiny_pose308_dir, tmp_path):
    run_dir = tmp_path / "run"
    train_main(pose_run_args(tiny_coco, tiny_pose308_dir, run_dir, 1, "--tracking.data_sheet_samples", "0"))
    assert (run_dir / "summary.json").is_file() and not (run_dir / SHEET_FILE).exists()
    (wandb_run,) = (run_dir / "wandb").glob("offline-run-*")
    _, history = logged_keys(next(wandb_run.glob("run-*.wandb")))
    assert not any(key.startswith("train/data_check") for key in history)


def test_a_negative_sample_count_is_refused(tmp_path):
    with pytest.raises(ValueError, match="tracking.data_sheet_samples must be 0"):
        DataSheet(tmp_path, -1)
