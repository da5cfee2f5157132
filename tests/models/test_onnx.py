"""ONNX export (``models/onnx.py``, ``export --format onnx``) and the onnxruntime backend: each task's graph gives
transformers' own outputs, the pose keypoints of the two backends agree, and the runtime config says what a
runtime needs."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from datamodules.errors import NotFound
from sapiens2_ft.models.onnx import OnnxModel, export_onnx, output_names
from sapiens2_ft.tasks.registry import TASKS, build_task_model, label_names

pytest.importorskip("onnxruntime")
pytestmark = pytest.mark.slow

SIZE = (128, 96)
# Measured max |onnxruntime - torch| on random tiny models: 2e-6 to 3e-5 (fp32, CPU; sums in another order).
ATOL = 1e-4
OUTPUTS = {"seg": ["logits"], "normal": ["normals"], "pointmap": ["pointmaps", "scales"],
           "matting": ["alphas", "foregrounds"]}  # pose: the heatmaps of a trained model, below
# One block of the tiny preset: an export's cost grows with the graph (about 7 s here at one block, 12 s at 4).
ONE_BLOCK = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_first_full_attention_layers=1,
                 num_last_full_attention_layers=0)


def _model(task: str, monkeypatch):
    from sapiens2_ft.models import presets

    monkeypatch.setitem(presets.BACKBONES, "onnx_test", {**presets.BACKBONES["tiny"], **ONE_BLOCK})
    spec = TASKS[task]
    labels = label_names(task, "coco17" if spec.model.label_arg == "keypoints" else None)
    torch.manual_seed(0)
    model, _ = build_task_model(task, labels, SIZE if task != "pointmap" else (256, 192), size="onnx_test",
                                head=dict(spec.model.heads["tiny"]))
    return model.eval()


@pytest.mark.parametrize("task", sorted(OUTPUTS))
def test_onnxruntime_gives_transformers_outputs(task, tmp_path, monkeypatch):
    model = _model(task, monkeypatch)
    size = tuple(model.config.image_size)
    names = export_onnx(model, size, tmp_path / "model.onnx")
    assert names == OUTPUTS[task]
    runtime = OnnxModel(tmp_path / "model.onnx", model.config)
    for batch in (1, 3):  # the batch is dynamic
        pixels = torch.randn(batch, 3, *size, generator=torch.Generator().manual_seed(batch))
        with torch.no_grad():
            expected = model(pixel_values=pixels)
        found = runtime(pixels)
        for name in names:
            diff = (found[name] - expected[name]).abs().max().item()
            print(f"{task} {name} batch {batch}: max abs diff {diff:.2e}")
            assert found[name].shape == expected[name].shape and diff <= ATOL, (name, diff)
    assert runtime(pixels).missing_field is None  # fields the graph lacks read as None, as in ModelOutput


def test_pose_keypoints_agree_between_backends_and_the_runtime_config(pose_run, tiny_coco, tmp_path):
    from sapiens2_ft import export
    from sapiens2_ft.predict.loading import load_inference

    run_dir, _ = pose_run
    out = export.main(["--checkpoint", str(run_dir / "checkpoints" / "last.ckpt"), "--out", str(tmp_path / "m"),
                       "--format", "onnx"])
    meta = json.loads((out / "onnx_config.json").read_text())
    assert meta["task"] == "pose" and meta["input"]["shape"] == ["batch", 3, 256, 192]
    assert meta["outputs"] == {"heatmaps": ["batch", 17, 64, 48]} and len(meta["labels"]) == 17
    assert meta["flip_pairs"] and "softmax" in meta["decode"] and meta["preprocessor"]["size"]["height"] == 256
    torch_model, _ = load_inference(str(out), tmp_path / "a")
    onnx_model, _ = load_inference(str(out), tmp_path / "b", backend="onnxruntime")
    assert isinstance(onnx_model.model, OnnxModel)
    crops = torch.randint(0, 256, (4, 3, 256, 192), generator=torch.Generator().manual_seed(0)).float()
    pixels = (crops - 120) / 58
    with torch.no_grad():
        a, b = torch_model.infer(pixels), onnx_model.infer(pixels)
        heatmaps = (torch_model.predict(pixels)["heatmaps"] - onnx_model.predict(pixels)["heatmaps"]).abs().max()
    print(f"pose heatmaps: max abs diff {heatmaps:.2e}")
    assert heatmaps <= ATOL
    px = (a["coords"] - b["coords"]).abs().max().item()
    print(f"pose keypoints: max |torch - onnxruntime| {px:.2e} px, scores {(a['scores'] - b['scores']).abs().max():.2e}")
    assert px <= 0.1 and torch.allclose(a["scores"], b["scores"], atol=1e-4)

    # docs/deploy.md's example (numpy, OpenCV and onnxruntime only) on a person of the val set: its crop, flip test,
    # heatmap argmax and mapping back to the image give the framework's own (affine.crop_matrix, the flip-tested maps
    # of infer, the inverse crop); tests/apps/test_keypoint_scores.py compares its scores
    import subprocess
    import sys

    import cv2

    from datamodules.transforms import affine
    from sapiens2_ft.models.preprocessing import normalize_images
    from sapiens2_ft.tasks.pose.codec import heatmap_to_input_coords

    gt = json.loads((tiny_coco / "annotations" / "person_keypoints_val2017.json").read_text())
    person = gt["annotations"][0]
    image = next(im for im in gt["images"] if im["id"] == person["image_id"])
    path = tiny_coco / "val2017" / image["file_name"]
    script = Path(__file__).resolve().parents[2] / "docs" / "examples" / "onnx_pose.py"
    printed = subprocess.run([sys.executable, str(script), str(out), str(path), *map(str, person["bbox"])],
                             capture_output=True, text=True, check=True).stdout.splitlines()
    example = np.array([[float(v) for v in line.split()[1:3]] for line in printed if line.strip()])
    matrix = affine.crop_matrix(*affine.box_to_center_scale(person["bbox"], 192 / 256), 0.0, (256, 192))
    crop = affine.warp_image(cv2.imread(str(path))[..., ::-1], matrix, (256, 192), affine.crop_interpolation(matrix))
    pixels = torch.from_numpy(np.ascontiguousarray(crop)).permute(2, 0, 1)[None]
    with torch.no_grad():
        heatmaps = torch_model.infer(normalize_images(pixels))["heatmaps"][0]
    k, h, w = heatmaps.shape
    at = heatmaps.reshape(k, -1).argmax(1)
    coords = heatmap_to_input_coords(torch.stack([at % w, at // w], 1).double(), (256, 192), (h, w)).numpy()
    expected = affine.transform_points(coords, affine.invert(matrix))
    print("example vs framework argmax (px):", np.abs(example - expected).max())
    assert example.shape == (17, 2) and np.abs(example - expected).max() <= 0.06  # printed to 0.1 px


def test_the_backend_needs_a_graph(pose_run, tmp_path, monkeypatch):
    from sapiens2_ft.predict.loading import load_inference

    run_dir, _ = pose_run
    with pytest.raises(NotFound, match="has no model.onnx; add it with"):
        load_inference(str(run_dir / "export"), tmp_path, backend="onnxruntime")
    assert output_names(_model("pose", monkeypatch), torch.zeros(1, 3, *SIZE)) == ["heatmaps"]


def test_the_fastest_installed_provider_comes_first_and_the_cpu_last():
    from sapiens2_ft.models.onnx import preferred_providers

    assert preferred_providers(["CPUExecutionProvider"]) == ["CPUExecutionProvider"]
    assert preferred_providers(["CPUExecutionProvider", "CUDAExecutionProvider", "AzureExecutionProvider"]) == [
        "CUDAExecutionProvider", "CPUExecutionProvider"]
    assert preferred_providers(["CUDAExecutionProvider", "TensorrtExecutionProvider"]) == [
        "TensorrtExecutionProvider", "CUDAExecutionProvider", "CPUExecutionProvider"]


def test_a_float16_export_is_a_float16_graph_with_the_float32_outputs(seg_checkpoint, tmp_path):
    """``export --format onnx --dtype float16``: the graph takes and computes float16 (half the file), and gives
    the float32 model's logits to float16's precision."""
    from transformers import AutoConfig

    from sapiens2_ft import export
    from sapiens2_ft.predict.loading import load_inference

    out = export.main(["--checkpoint", str(seg_checkpoint), "--out", str(tmp_path / "m"), "--format", "onnx",
                       "--dtype", "float16"])
    assert json.loads((out / "onnx_config.json").read_text())["dtype"] == "float16"
    runtime = OnnxModel(out / "model.onnx", AutoConfig.from_pretrained(out))
    assert runtime.numpy_dtype == "float16"
    torch_model, _ = load_inference(str(out), tmp_path / "a")
    pixels = torch.randn(2, 3, 128, 96, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        expected = torch_model.model(pixel_values=pixels).logits
    diff = (runtime(pixels)["logits"] - expected).abs().max().item()
    print(f"float16 ONNX logits: max abs diff {diff:.2e} (logits up to {expected.abs().max():.1f})")
    # measured 5.9e-3 on logits up to 6.5: float16's relative step of 2^-11 compounded over the layers
    assert diff < 0.01 * expected.abs().max().item()
