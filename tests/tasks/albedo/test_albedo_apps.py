"""Albedo through the entry points on the renderer's albedo (``dense_root``): a run of ``albedo_demo.yaml`` from a
random tiny model trains, validates (PSNR and SSIM) and exports; the export loads with transformers' Auto class as
the albedo task; ``predict`` writes its pictures; ``evaluate`` scores the export as the run did; the ONNX export
runs under ``predict --backend onnxruntime`` with the same maps."""

from __future__ import annotations

import json
from pathlib import Path

import cv2
import numpy as np
import pytest

SIZE = (128, 96)


@pytest.fixture(scope="module")
def albedo_run(dense_root, tmp_path_factory):
    from sapiens2_ft.training.cli import main as train

    run_dir = tmp_path_factory.mktemp("albedo") / "run"
    return train(["--config", "albedo_demo.yaml", "--run_dir", str(run_dir), "--data.root", str(dense_root),
                  "--data.synthetic", "null", "--model.pretrained", "null", "--model.size", "tiny",
                  "--data.input_size", json.dumps(list(SIZE)), "--data.batch_size", "2", "--data.num_workers", "0",
                  "--trainer.max_steps", "2", "--trainer.val_check_interval", "2", "--model.optim.warmup_steps", "1",
                  "--trainer.num_sanity_val_steps", "0", "--trainer.enable_progress_bar", "false",
                  "--tracking.logger", "csv"])


def test_a_run_validates_exports_and_predicts(albedo_run, dense_root, tmp_path):
    from transformers import AutoModelForNormalEstimation

    from sapiens2_ft.predict.cli import main as predict
    from sapiens2_ft.tasks.registry import task_of_config

    summary = albedo_run
    assert summary["monitor"] == "val/psnr" and summary["global_step"] == 2
    metrics = summary["metrics"]
    assert {"mae", "rmse", "psnr", "ssim", "grad_l1", "l1", "grad", "chroma", "loss"} <= set(metrics)
    assert metrics["psnr"] == pytest.approx(-20 * np.log10(metrics["rmse"]), rel=1e-6) and -1 < metrics["ssim"] < 1
    run = Path(summary["run_dir"])
    assert {p.name.rsplit("_", 1)[0] for p in (run / "overlays").glob("*.png")} == {"albedo"}
    assert (run / "data_check.png").is_file() and list((run / "diagnostics").rglob("albedo_error*"))

    exported = Path(summary["export"])  # transformers' own class, three channels, the task recorded
    model = AutoModelForNormalEstimation.from_pretrained(exported).eval()
    assert model.config.id2label == {0: "albedo_r", 1: "albedo_g", 2: "albedo_b"}
    assert task_of_config(model.config) == "albedo"
    assert json.loads((exported / "preprocessor_config.json").read_text())["do_pad"] is True

    image = sorted((dense_root / "val" / "images").iterdir())[0]
    out = predict(["--model", str(exported), "--input", str(image), "--out", str(tmp_path / "predicted"),
                   "--workers", "0", "--device", "cpu"])
    albedo = np.load(out / f"{image.stem}.npy")
    height, width = cv2.imread(str(image)).shape[:2]
    assert albedo.shape == (height, width, 3) and albedo.dtype == np.float16
    assert 0 <= albedo.min() and albedo.max() <= 1  # clamped, as upstream's demo shows it
    picture = cv2.imread(str(out / f"{image.stem}_albedo.png"))
    np.testing.assert_allclose(picture[..., ::-1] / 255.0, albedo.astype(np.float32), atol=1 / 255 + 1e-3)


def test_evaluate_scores_the_export_as_the_run_did(albedo_run, dense_root, tmp_path):
    from sapiens2_ft import evaluate

    result = evaluate.main(["--config", "albedo_demo.yaml", "--data.root", str(dense_root), "--data.synthetic",
                            "null", "--data.batch_size", "2", "--data.num_workers", "0",
                            "--model", albedo_run["export"], "--out", str(tmp_path / "eval")])
    for key in ("mae", "psnr", "ssim"):
        assert result["metrics"][key] == pytest.approx(albedo_run["metrics"][key], rel=1e-4), key
    assert (tmp_path / "eval" / "panels").is_dir() and list((tmp_path / "eval" / "predictions").glob("*.npy"))


@pytest.mark.slow
def test_onnx_export_predicts_the_same_albedo(albedo_run, dense_root, tmp_path):
    from sapiens2_ft import export
    from sapiens2_ft.predict.cli import main as predict

    onnx_dir = export.main(["--checkpoint", albedo_run["best_checkpoint"], "--out", str(tmp_path / "onnx"),
                            "--format", "onnx"])
    meta = json.loads((onnx_dir / "onnx_config.json").read_text())
    assert meta["task"] == "albedo" and "RGB albedo" in meta["decode"]
    image = sorted((dense_root / "val" / "images").iterdir())[0]
    maps = {}
    for backend in ("torch", "onnxruntime"):
        out = predict(["--model", str(onnx_dir), "--input", str(image), "--out", str(tmp_path / backend),
                       "--workers", "0", "--device", "cpu", "--backend", backend])
        maps[backend] = np.load(out / f"{image.stem}.npy").astype(np.float32)
    np.testing.assert_allclose(maps["onnxruntime"], maps["torch"], atol=2e-3)  # float16 files
