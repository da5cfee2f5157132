"""Tracking: wandb's online/offline choice, the offline run's contents, the results page and image panels."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
from conftest import pose_run_args
from wandb_records import logged_keys

from sapiens2_ft.tasks.visualize import (CAPTION_HEIGHT, inverse_depth_turbo, label_overlay, matte_composite,
                                         normal_rgb)
from sapiens2_ft.training.results_page import metric_family, read_metrics, write_results_png
from sapiens2_ft.training.tracking import wandb_mode


@pytest.fixture
def no_wandb_env(monkeypatch, tmp_path):
    for name in ("WANDB_MODE", "WANDB_API_KEY", "WANDB_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    return tmp_path / "netrc"


def test_wandb_is_offline_without_credentials_and_online_with_them(no_wandb_env, monkeypatch):
    assert wandb_mode() == "offline"
    no_wandb_env.write_text("machine example.com login me password secret\n")
    assert wandb_mode() == "offline"
    no_wandb_env.write_text("machine api.wandb.ai login user password 0123456789abcdef\n")
    assert wandb_mode() == "online"  # `wandb login` wrote a key
    no_wandb_env.unlink()
    monkeypatch.setenv("WANDB_API_KEY", "0123456789abcdef")
    assert wandb_mode() == "online"
    monkeypatch.setenv("WANDB_MODE", "disabled")
    assert wandb_mode() == "disabled"  # an explicit mode wins


def test_offline_wandb_run_holds_config_scalars_and_pose_panels(pose_run):
    run_dir, summary = pose_run
    (wandb_run,) = (run_dir / "wandb").glob("offline-run-*")
    config, history = logged_keys(next(wandb_run.glob("run-*.wandb")))
    assert {"config", "git_commit", "keypoints", "optim"} <= config  # the resolved recipe, the code version
    for key in ("train/loss", "val/AP", "train/samples_per_s", "system/peak_memory_gib", "lr-AdamW/head",
                "lr-AdamW/layer0", "val/pose/filenames"):
        assert key in history, key
    panels = list((wandb_run / "files" / "media" / "images" / "val").glob("pose_*.png"))
    assert len(panels) >= 2, "pose panel images missing from the offline wandb run"


def test_run_directory_has_results_page_and_overlays(pose_run):
    run_dir, _ = pose_run
    page = cv2.imread(str(run_dir / "results.png"))
    assert page is not None and page.shape[0] > 200 and page.shape[1] > 400
    overlay = cv2.imread(str(run_dir / "overlays" / "pose_0.png"))
    # ground truth | prediction side by side, 256x192 crops enlarged x2 under a caption strip
    assert overlay.shape == (CAPTION_HEIGHT + 2 * 256, 2 * 2 * 192, 3)
    assert (overlay[:CAPTION_HEIGHT, :, 0] > 200).any()  # the captions are in the strip, not on the picture


def test_results_page_keeps_the_latest_value_of_a_step_logged_twice(tmp_path):
    (tmp_path / "metrics.csv").write_text(
        "epoch,step,train/loss,val/AP,lr-AdamW/pg1,lr-AdamW/pg2\n"
        "0,0,2.0,,0.001,0.0005\n0,1,1.5,,0.002,0.001\n0,1,,0.1,,\n"
        "0,2,1.9,,0.003,0.0015\n"  # crashed after step 2 ...
        "0,2,1.2,,0.003,0.0015\n0,3,1.0,0.3,0.004,0.002\n")  # ... resumed from step 1's checkpoint
    series = read_metrics(tmp_path / "metrics.csv")
    assert series["train/loss"] == [(0, 2.0), (1, 1.5), (2, 1.2), (3, 1.0)]
    assert series["val/AP"] == [(1, 0.1), (3, 0.3)]
    assert write_results_png(tmp_path, "val/AP") == tmp_path / "results.png"
    assert cv2.imread(str(tmp_path / "results.png")) is not None


def test_results_page_groups_a_metric_with_its_variants():
    families = {name: metric_family(name) for name in
                ("AP", "AP50", "APM", "APL", "AR75", "angle_mean", "angle_rmse", "within_5cm", "l1", "l2", "mIoU")}
    assert families == {"AP": "AP", "AP50": "AP", "APM": "AP", "APL": "AP", "AR75": "AR", "angle_mean": "angle",
                        "angle_rmse": "angle", "within_5cm": "within", "l1": "l1", "l2": "l2", "mIoU": "mIoU"}


def test_visualisations_show_what_they_claim():
    image = np.full((8, 8, 3), 100, np.uint8)
    labels = np.zeros((8, 8), np.int64)
    labels[:4] = 3
    overlay = label_overlay(image, labels, 29)
    assert (overlay[4:] == 100).all() and not (overlay[:4] == 100).all()  # only class pixels are coloured
    up = np.zeros((8, 8, 3))
    up[..., 2] = 1.0
    assert (normal_rgb(up)[..., 2] == 255).all() and (normal_rgb(up)[..., 0] == 127).all()
    depth = np.tile(np.linspace(1, 5, 8), (8, 1))
    mask = np.ones((8, 8), bool)
    mask[:, -1] = False
    turbo = inverse_depth_turbo(depth, mask)
    assert (turbo[:, -1] == 0).all() and turbo[:, 0].astype(int).sum() != turbo[:, -2].astype(int).sum()
    alpha = np.zeros((8, 8))
    alpha[:, :4] = 1
    composite = matte_composite(np.full((8, 8, 3), 255.0), alpha)
    assert (composite[:, :4] == 255).all() and (composite[:, 4:] < 255).all()


def test_tensorboard_is_one_switch_away(tiny_coco, tiny_pose308_dir, tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from sapiens2_ft.training.cli import main

    run_dir = tmp_path / "run"
    main(pose_run_args(tiny_coco, tiny_pose308_dir, run_dir, 2, "--tracking.logger", "tensorboard",
                       "--export", "false"))
    assert not (run_dir / "wandb").exists()
    events = EventAccumulator(str(run_dir / "tensorboard"), size_guidance={"images": 0})
    events.Reload()
    assert {"train/loss", "val/AP", "train/samples_per_s"} <= set(events.Tags()["scalars"])
    assert "val/pose/0" in events.Tags()["images"]
    assert (run_dir / "metrics.csv").exists()  # CSV is always written


def test_failed_online_start_falls_back_to_offline(no_wandb_env, monkeypatch, tmp_path):
    from lightning.pytorch.loggers import WandbLogger

    from sapiens2_ft.training.tracking import TrackingConfig, build_loggers

    monkeypatch.setenv("WANDB_API_KEY", "0123456789abcdef0123456789abcdef01234567")
    monkeypatch.setenv("WANDB_BASE_URL", "http://127.0.0.1:9")  # nothing listens there
    monkeypatch.setenv("WANDB_INIT_TIMEOUT", "3")
    (_, logger) = build_loggers(TrackingConfig(), tmp_path, "abcd1234")
    assert isinstance(logger, WandbLogger) and logger.experiment.settings.mode == "offline"
    logger.experiment.finish()
