"""Shared fixtures: tiny COCO-format datasets and tiny Sapiens2 checkpoints, made on the fly."""

from __future__ import annotations

import atexit
import ctypes
import json
import os
import shutil
import tempfile
from pathlib import Path

import datamodules.boundary  # noqa: F401  (before cv2: sets OpenCV's pixel limit, as every command of ours does)
import cv2
import numpy as np
import pytest

from opencv_paths import opencv_path  # noqa: F401  (a fixture for every test)

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("NO_ALBUMENTATIONS_UPDATE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The user's cache (shard downloads, data indexes) of this test process and what it starts: never the real one.
if "SAPIENS2_FT_CACHE" not in os.environ:
    os.environ["SAPIENS2_FT_CACHE"] = tempfile.mkdtemp(prefix="sapiens2-ft-test-cache-")
    atexit.register(shutil.rmtree, os.environ["SAPIENS2_FT_CACHE"], True)
if os.environ.get("PYTEST_XDIST_WORKER"):  # `pytest -n 2`: each worker (and what it starts) computes on one thread, so
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # two workers share two cores instead of oversubscribing them


def keep_freed_memory() -> None:
    """glibc returns the big blocks torch frees on every CPU training step to the kernel, then page-faults them back
    on the next step; kept in the heap they are reused (``python bench/malloc_reuse.py``: fewer page faults, less
    system time, more peak memory; step times within this machine's noise). The variables reach the processes the
    suite starts (xdist workers, ranks, train.py runs); ``mallopt`` sets this process to the same values."""
    options = {"MALLOC_MMAP_THRESHOLD_": (-3, 1 << 30), "MALLOC_TRIM_THRESHOLD_": (-1, (1 << 31) - 1)}
    for name, (_, value) in options.items():
        os.environ.setdefault(name, str(value))
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (macOS): nothing to tune
        return
    for name, (option, _) in options.items():
        libc.mallopt(option, int(os.environ[name]))


keep_freed_memory()

COCO17 = ["nose", "left_eye", "right_eye", "left_ear", "right_ear", "left_shoulder", "right_shoulder",
          "left_elbow", "right_elbow", "left_wrist", "right_wrist", "left_hip", "right_hip",
          "left_knee", "right_knee", "left_ankle", "right_ankle"]
# A standing figure in a unit box (x right, y down), COCO-17 order.
TEMPLATE = np.array([[.5, .08], [.54, .06], [.46, .06], [.58, .08], [.42, .08], [.66, .22], [.34, .22],
                     [.72, .38], [.28, .38], [.75, .52], [.25, .52], [.6, .55], [.4, .55], [.62, .75],
                     [.38, .75], [.62, .95], [.38, .95]])


def write_coco(root: Path, split_images: str, ann_name: str, num_images: int = 4, size=(256, 192), seed: int = 0,
               people_per_image: int = 2) -> Path:
    """Images of stick figures plus their COCO keypoints json; returns the json path."""
    rng = np.random.default_rng(seed)
    h, w = size
    (root / split_images).mkdir(parents=True, exist_ok=True)
    (root / "annotations").mkdir(parents=True, exist_ok=True)
    images, annotations = [], []
    for i in range(num_images):
        image = rng.integers(0, 80, size=(h, w, 3), dtype=np.uint8)
        for p in range(people_per_image):
            bw, bh = rng.uniform(0.3, 0.45) * w, rng.uniform(0.6, 0.9) * h
            x0, y0 = rng.uniform(0, w - bw), rng.uniform(0, h - bh)
            kpts = TEMPLATE * [bw, bh] + [x0, y0] + rng.normal(0, 1.5, TEMPLATE.shape)
            for a, b in [(5, 7), (7, 9), (6, 8), (8, 10), (11, 13), (13, 15), (12, 14), (14, 16), (5, 6), (11, 12),
                         (5, 11), (6, 12), (0, 5), (0, 6)]:
                cv2.line(image, tuple(int(v) for v in kpts[a]), tuple(int(v) for v in kpts[b]), (220, 200, 90), 3)
            vis = np.full(17, 2.0)
            flat = np.concatenate([kpts, vis[:, None]], 1).reshape(-1)
            annotations.append({"id": len(annotations) + 1, "image_id": i + 1, "category_id": 1,
                                "keypoints": [float(v) for v in flat], "num_keypoints": 17,
                                "bbox": [float(x0), float(y0), float(bw), float(bh)], "area": float(bw * bh),
                                "iscrowd": 0})
        name = f"{i:06d}.jpg"
        cv2.imwrite(str(root / split_images / name), image)
        images.append({"id": i + 1, "file_name": name, "height": h, "width": w})
    ann_file = root / "annotations" / ann_name
    ann_file.write_text(json.dumps({
        "images": images, "annotations": annotations,
        "categories": [{"id": 1, "name": "person", "supercategory": "person", "keypoints": COCO17,
                        "skeleton": [[16, 14], [14, 12], [17, 15], [15, 13]]}],
    }))
    return ann_file


@pytest.fixture(scope="session")
def tiny_coco(tmp_path_factory) -> Path:
    """A COCO-2017-layout dataset: annotations/person_keypoints_{train,val}2017.json + images."""
    root = tmp_path_factory.mktemp("coco")
    write_coco(root, "train2017", "person_keypoints_train2017.json", num_images=4, seed=0)
    write_coco(root, "val2017", "person_keypoints_val2017.json", num_images=2, seed=1)
    return root


@pytest.fixture
def decoded(monkeypatch) -> list:
    """The (height, width) of every image OpenCV decodes in this process (a fixture of
    the tests that refuse images before decoding them)."""
    sizes, real = [], cv2.imdecode

    def imdecode(raw, flags):
        image = real(raw, flags)
        sizes.append(None if image is None else image.shape[:2])
        return image

    monkeypatch.setattr(cv2, "imdecode", imdecode)
    return sizes


def tiny_pose_config(num_labels: int):
    from transformers import Sapiens2Config, Sapiens2HeadConfig

    from sapiens2_ft.models.presets import BACKBONES

    config = Sapiens2Config(**{**BACKBONES["tiny"], "hidden_size": 64, "intermediate_size": 128,
                               "num_hidden_layers": 2}, image_size=[256, 192], pos_embed_rescale=None,
                            head_config=Sapiens2HeadConfig(upsample_out_channels=[32, 32], conv_out_channels=[32]))
    config.num_labels = num_labels
    return config


@pytest.fixture(scope="session")
def tiny_pose308_dir(tmp_path_factory) -> Path:
    """A 308-keypoint pose model saved with save_pretrained: stands in for facebook/sapiens2-pose-*."""
    from transformers import Sapiens2ForPoseEstimation

    out = tmp_path_factory.mktemp("sapiens2-pose-tiny")
    model = Sapiens2ForPoseEstimation(tiny_pose_config(308))
    model.save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_pretrain_dir(tmp_path_factory) -> Path:
    """A pretrain-only backbone (Sapiens2Model) saved with save_pretrained."""
    from transformers import Sapiens2Model

    out = tmp_path_factory.mktemp("sapiens2-pretrain-tiny")
    config = tiny_pose_config(2)
    config.head_config = None
    Sapiens2Model(config).save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def dense_root(tmp_path_factory) -> Path:
    """8 synthetic images (train 6 / val 2) with every dense target."""
    from datamodules.synthetic import generate_dataset

    root = tmp_path_factory.mktemp("dense") / "synthetic"
    generate_dataset(root, 8, seed=0, progress=False)
    return root


def pose_run_args(coco: Path, model: Path, run_dir: Path, steps: int = 4, *extra: str) -> list[str]:
    """train.py arguments of a short COCO-17 pose run on ``tiny_coco`` from ``tiny_pose308_dir``."""
    return ["--config", "pose_coco.yaml", "--run_dir", str(run_dir), "--model.pretrained", str(model),
            "--data.root", str(coco), "--data.input_size", "[256, 192]", "--model.sigma", "2",
            "--data.batch_size", "2", "--data.num_workers", "0", "--trainer.max_steps", str(steps),
            "--trainer.val_check_interval", "2", "--trainer.log_every_n_steps", "1",
            "--trainer.accelerator", "cpu", "--trainer.devices", "1", "--trainer.enable_progress_bar", "false",
            *extra]


@pytest.fixture(scope="session")
def pose_run(tiny_coco, tiny_pose308_dir, tmp_path_factory) -> tuple[Path, dict]:
    """A finished 4-step pose run with the default tracking (wandb, offline here) and export: (run_dir, summary)."""
    from sapiens2_ft.training.cli import main

    run_dir = tmp_path_factory.mktemp("pose_run") / "run"
    return run_dir, main(pose_run_args(tiny_coco, tiny_pose308_dir, run_dir))


@pytest.fixture(scope="session")
def seg_checkpoint(dense_root, tmp_path_factory):
    """A segmentation checkpoint written by a Lightning Trainer after 2 steps (tiny preset, 29 classes).

    Seeded, so that every session (and xdist worker, whatever ran before it) gets the same weights: a random head
    calls ~28 of 29 pixels people (any class but background), and some seeds call every pixel of an image people,
    which the tests that mask by people cannot use. Seed 1 leaves 14-15% background on ``dense_root``'s val images
    and on ``test_app``'s photo (seeds 0-9 measured: 0.0-18%, seed 2: none)."""
    import lightning as L
    import torch

    from sapiens2_ft.tasks.dense_data import DenseTaskData
    from sapiens2_ft.tasks.seg.module import SegmentationModule

    out = tmp_path_factory.mktemp("seg_ckpt")
    with torch.random.fork_rng():  # the other tests' random state is left as it was
        torch.manual_seed(1)  # the weights, and the sampler's seed (torch.initial_seed())
        module = SegmentationModule(size="tiny", input_size=(128, 96))
        data = DenseTaskData("seg", root=str(dense_root), input_size=(128, 96), batch_size=2, num_workers=0)
        trainer = L.Trainer(max_steps=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, limit_val_batches=0, default_root_dir=out)
        trainer.fit(module, datamodule=data)
    trainer.save_checkpoint(out / "seg.ckpt")
    return out / "seg.ckpt"


def tiny_detector(out: Path, labels=("person", "car", "dog"), size: int = 128, seed: int = 0) -> Path:
    """A randomly initialised RT-DETR (0.28M parameters) with its image processor, saved as from the hub."""
    import torch
    from transformers import RTDetrConfig, RTDetrForObjectDetection, RTDetrImageProcessorPil, RTDetrResNetConfig

    backbone = RTDetrResNetConfig(embedding_size=8, hidden_sizes=[8, 16, 32, 64], depths=[1, 1, 1, 1],
                                  layer_type="basic", out_indices=[2, 3, 4])
    config = RTDetrConfig(backbone_config=backbone, encoder_in_channels=[16, 32, 64], encoder_hidden_dim=32,
                          encoder_ffn_dim=64, encoder_attention_heads=2, d_model=32, decoder_in_channels=[32, 32, 32],
                          decoder_ffn_dim=64, decoder_attention_heads=2, decoder_layers=1, num_queries=20,
                          num_denoising=0, id2label=dict(enumerate(labels)),
                          label2id={name: i for i, name in enumerate(labels)})
    torch.manual_seed(seed)
    RTDetrForObjectDetection(config).save_pretrained(out)
    RTDetrImageProcessorPil(size={"height": size, "width": size}).save_pretrained(out)
    return out


@pytest.fixture(scope="session")
def tiny_detector_dir(tmp_path_factory) -> Path:
    return tiny_detector(tmp_path_factory.mktemp("tiny-rtdetr"))


@pytest.fixture(scope="session")
def released_hub(tiny_pose308_dir, tiny_detector_dir, tmp_path_factory) -> Path:
    """A hub cache with the released pose model's id (a tiny 308-keypoint model saved with save_pretrained alone, as
    the hub repo holds it) and the default person detector's (a tiny RT-DETR); use it with ``hub_cache.use_hub_cache``."""
    from hub_cache import write_hub_cache

    from sapiens2_ft.models.detector import DEFAULT_DETECTOR

    return write_hub_cache(tmp_path_factory.mktemp("hub"), {"facebook/sapiens2-pose-0.4b": tiny_pose308_dir,
                                                             DEFAULT_DETECTOR: tiny_detector_dir})


DEMO_IMAGES = 300  # the demo tests' data: 240 train / 60 val images of the demos' seed 0


@pytest.fixture(scope="session")
def demo_data(tmp_path_factory) -> Path:
    """The demos' synthetic data, fewer images, rendered once for the pose and dense demo tests."""
    from datamodules.synthetic import ensure_dataset

    return ensure_dataset(tmp_path_factory.mktemp("demo_data") / "synthetic", DEMO_IMAGES, seed=0)


def pytest_collection_modifyitems(config, items):
    """Under ``pytest -n N`` the long runs (``slow``, ``distributed``) go first and the short tests fill the gaps,
    so that no worker is left alone with a long run at the end; a plain ``pytest`` keeps the file order."""
    if config.pluginmanager.hasplugin("xdist") and getattr(config.option, "numprocesses", None):
        items.sort(key=lambda item: not (item.get_closest_marker("slow") or item.get_closest_marker("distributed")))
