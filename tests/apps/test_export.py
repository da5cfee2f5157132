"""Export to a transformers directory, and the predict CLI on exported models and checkpoints."""

from __future__ import annotations

import json
import shutil

import cv2
import numpy as np
import pytest
import torch
import yaml
from conftest import COCO17
from pycocotools.coco import COCO
from transformers import AutoModelForPoseEstimation, AutoModelForSemanticSegmentation
from transformers.image_processing_utils import ImageProcessingMixin

from datamodules.errors import BadInput
from datamodules.keypoints.metainfo import load_metainfo, parse_metainfo
from datamodules.transforms import affine
from sapiens2_ft import predict
from sapiens2_ft.predict.boxes import read_boxes
from sapiens2_ft.models.checkpoints import CheckpointError, load_model
from sapiens2_ft.tasks.dense_maps import unwarp
from sapiens2_ft.tasks.normal.module import NormalModule
from sapiens2_ft.tasks.pose.module import PoseModule
from sapiens2_ft.tasks.registry import model_class
from sapiens2_ft.tasks.seg.module import SegmentationModule
from sapiens2_ft.training.hf_export import export_checkpoint


def test_pose_export_loads_with_auto_class_and_matches_the_module(pose_run, tiny_pose308_dir):
    run_dir, summary = pose_run
    export_dir = run_dir / "export"  # written at the end of fit, from the best checkpoint
    assert summary["export"] == str(export_dir)
    model = AutoModelForPoseEstimation.from_pretrained(export_dir).eval()
    assert [model.config.id2label[i] for i in range(17)] == COCO17
    metainfo = load_metainfo("coco17")
    assert [list(p) for p in model.config.flip_pairs] == metainfo.flip_pairs
    assert parse_metainfo(yaml.safe_load((export_dir / "keypoints.yaml").read_text()), "export") == \
        parse_metainfo(metainfo.to_dict(), "export")  # the keypoint set survives whole
    processor = ImageProcessingMixin.get_image_processor_dict(str(export_dir))[0]
    assert processor["size"] == {"height": 256, "width": 192}
    assert processor["image_mean"] == pytest.approx([0.485, 0.456, 0.406], abs=1e-4)

    # The module built as in training, given the best checkpoint's weights the Lightning way.
    module = PoseModule(pretrained=str(tiny_pose308_dir), keypoints="coco17", input_size=(256, 192))
    module.configure_model()
    module.load_state_dict(torch.load(summary["best_checkpoint"], weights_only=True)["state_dict"])
    module.eval()
    x = torch.randn(2, 3, 256, 192)
    with torch.no_grad():
        assert torch.allclose(model(x).heatmaps, module(x)["heatmaps"], atol=1e-5)


def test_seg_export_matches_the_module(seg_checkpoint, tmp_path):
    out = export_checkpoint(seg_checkpoint, tmp_path / "export")
    model = AutoModelForSemanticSegmentation.from_pretrained(out).eval()
    assert model.config.id2label[22] == "Torso" and model.config.num_labels == 29
    module = SegmentationModule(size="tiny", input_size=(128, 96))
    module.configure_model()
    module.load_state_dict(torch.load(seg_checkpoint, weights_only=True)["state_dict"])
    module.eval()
    x = torch.randn(1, 3, 128, 96)
    with torch.no_grad():
        assert torch.allclose(model(x).logits, module(x)["logits"], atol=1e-5)


def test_mismatched_checkpoint_weights_are_refused_with_the_list(seg_checkpoint, tmp_path):
    data = torch.load(seg_checkpoint, weights_only=True)
    state = data["state_dict"]
    state.pop(next(k for k in state if k.endswith("predictor.bias")))
    weight = next(k for k in state if k.endswith("predictor.weight"))
    state[weight] = state[weight][:5]
    state["model.extra.weight"] = torch.zeros(1)
    torch.save(data, tmp_path / "broken.ckpt")
    with pytest.raises(CheckpointError) as err:
        load_model(tmp_path / "broken.ckpt", model_class)
    message = str(err.value)
    assert "missing (1): decode_head.predictor.bias" in message
    assert "unexpected (1): extra.weight" in message
    assert "decode_head.predictor.weight [5, 32, 1, 1] vs model [29, 32, 1, 1]" in message


def test_predict_pose_writes_coco_results_and_overlays(pose_run, tiny_coco, tmp_path):
    gt_file = tiny_coco / "annotations" / "person_keypoints_val2017.json"
    out = predict.main(["--model", str(pose_run[0] / "export"), "--input", str(tiny_coco / "val2017"),
                        "--out", str(tmp_path / "with_boxes"), "--boxes", str(gt_file), "--batch_size", "3"])
    gt = COCO(str(gt_file))
    results = json.loads((out / "keypoints.json").read_text())
    assert len(results) == len(gt.getAnnIds())  # one result per person box
    detections = gt.loadRes(results)  # valid COCO keypoint results for the user's own annotations
    assert all(len(a["keypoints"]) == 17 * 3 for a in detections.dataset["annotations"])
    assert sorted(p.name for p in (out / "overlays").iterdir()) == ["000000.jpg", "000001.jpg"]

    # Without boxes: one whole-image person per image, and images.json to read the results against.
    out = predict.main(["--model", str(pose_run[0] / "export"), "--input", str(tiny_coco / "val2017"),
                        "--out", str(tmp_path / "whole"), "--whole_image"])
    images = COCO(str(out / "images.json"))
    results = images.loadRes(str(out / "keypoints.json"))
    assert len(results.getAnnIds()) == 2
    # Keypoints come back in image pixels, inside the padded whole-image crop, which reaches past the
    # image border (a barely trained model may peak in the padding), plus DARK's largest refinement step
    # (5 heatmap pixels; the 64x48 heatmap is a quarter of the input).
    center, scale = affine.box_to_center_scale([0, 0, 192, 256], 192 / 256)
    margin = 5 * scale / np.array([48, 64])
    low, high = center - scale / 2 - margin, center + scale / 2 + margin
    for ann in results.dataset["annotations"]:
        xy = np.asarray(ann["keypoints"]).reshape(-1, 3)[:, :2]
        assert ((xy >= low) & (xy <= high)).all(), (xy.min(0), xy.max(0), low, high)


def test_predict_dense_from_a_checkpoint_writes_maps_at_image_size(seg_checkpoint, dense_root, tmp_path):
    image = next((dense_root / "val" / "images").iterdir())
    out = predict.main(["--model", str(seg_checkpoint), "--input", str(image), "--out", str(tmp_path / "out")])
    assert (out / "model" / "model.safetensors").exists()  # the checkpoint was exported first
    labels = cv2.imread(str(out / f"{image.stem}.png"), cv2.IMREAD_UNCHANGED)
    height, width = cv2.imread(str(image)).shape[:2]
    assert labels.shape == (height, width) and labels.max() < 29
    assert cv2.imread(str(out / f"{image.stem}_overlay.png")).shape == (height, width, 3)


def test_predict_pose_keys_images_by_relative_path(pose_run, tiny_coco, tmp_path):
    """Same-named images in subfolders keep their own ids, results and overlays."""
    images = tmp_path / "in"
    for folder, source in [("a", "000000.jpg"), ("b", "000001.jpg")]:
        (images / folder).mkdir(parents=True)
        shutil.copy(tiny_coco / "val2017" / source, images / folder / "000000.jpg")
    model = str(pose_run[0] / "export")
    out = predict.main(["--model", model, "--input", str(images), "--out", str(tmp_path / "whole"), "--whole_image"])
    coco_images = json.loads((out / "images.json").read_text())["images"]
    assert sorted((im["file_name"], im["id"]) for im in coco_images) == [("a/000000.jpg", 1), ("b/000000.jpg", 2)]
    assert sorted(r["image_id"] for r in json.loads((out / "keypoints.json").read_text())) == [1, 2]
    assert (out / "overlays" / "a" / "000000.jpg").is_file() and (out / "overlays" / "b" / "000000.jpg").is_file()

    # A detections list names images by their path relative to --input; non-person detections are left out.
    box = {"bbox": [10, 20, 80, 160], "score": 0.9}
    detections = [{"file_name": "a/000000.jpg", **box}, {"file_name": "b/000000.jpg", **box},
                  {"file_name": "b/000000.jpg", **box}, {"file_name": "a/000000.jpg", "category_id": 2, **box}]
    (tmp_path / "detections.json").write_text(json.dumps(detections))
    out = predict.main(["--model", model, "--input", str(images), "--out", str(tmp_path / "listed"),
                        "--boxes", str(tmp_path / "detections.json")])
    ids = {im["file_name"]: im["id"] for im in json.loads((out / "images.json").read_text())["images"]}
    per_image = [r["image_id"] for r in json.loads((out / "keypoints.json").read_text())]
    assert [per_image.count(ids["a/000000.jpg"]), per_image.count(ids["b/000000.jpg"])] == [1, 2]


def test_boxes_match_the_relative_path_then_a_unique_bare_name(tiny_coco):
    gt_file = tiny_coco / "annotations" / "person_keypoints_val2017.json"
    gt = json.loads(gt_file.read_text())
    ids, boxes = read_boxes(gt_file, ["c/000000.jpg", "d/000001.jpg"])  # gt names are bare
    assert ids == {"c/000000.jpg": 1, "d/000001.jpg": 2}
    assert boxes["d/000001.jpg"] == [[*a["bbox"], 1.0] for a in gt["annotations"] if a["image_id"] == 2]
    with pytest.raises(BadInput, match=r"'000000.jpg' is ambiguous: images \['a/000000.jpg', 'b/000000.jpg'\]"):
        read_boxes(gt_file, ["a/000000.jpg", "b/000000.jpg", "000001.jpg"])


def test_predict_pose_boxes_keep_only_person_annotations(pose_run, tiny_coco, tmp_path):
    gt_file = tiny_coco / "annotations" / "person_keypoints_val2017.json"
    data = json.loads(gt_file.read_text())
    people = len(data["annotations"])
    data["categories"].append({"id": 2, "name": "bicycle", "supercategory": "vehicle"})
    data["annotations"].append({"id": 100, "image_id": 1, "category_id": 2, "bbox": [5, 5, 50, 50], "area": 2500,
                                "iscrowd": 0})
    (tmp_path / "boxes.json").write_text(json.dumps(data))
    out = predict.main(["--model", str(pose_run[0] / "export"), "--input", str(tiny_coco / "val2017"),
                        "--out", str(tmp_path / "out"), "--boxes", str(tmp_path / "boxes.json")])
    results = json.loads((out / "keypoints.json").read_text())
    assert len(results) == people
    assert all(r["bbox"] != [5, 5, 50, 50] for r in results)


def test_predict_skips_unreadable_images(pose_run, tiny_coco, tmp_path, capsys):
    images = tmp_path / "in"
    images.mkdir()
    shutil.copy(tiny_coco / "val2017" / "000000.jpg", images / "good.jpg")
    (images / "bad.jpg").write_bytes(b"not an image")
    raw = (tiny_coco / "val2017" / "000001.jpg").read_bytes()
    (images / "truncated.jpg").write_bytes(raw[:len(raw) // 2])
    model = str(pose_run[0] / "export")
    out = predict.main(["--model", model, "--input", str(images), "--out", str(tmp_path / "out"), "--whole_image"])
    captured = capsys.readouterr()
    assert "bad.jpg" in captured.err and "truncated.jpg" in captured.err
    assert captured.out.strip().splitlines()[-1].endswith("; 2 images skipped (unreadable or too large): bad.jpg, "
                                                          "truncated.jpg")
    assert [im["file_name"] for im in json.loads((out / "images.json").read_text())["images"]] == ["good.jpg"]
    assert len(json.loads((out / "keypoints.json").read_text())) == 1
    with pytest.raises(SystemExit) as err:  # nothing readable: a non-zero exit
        predict.main(["--model", model, "--input", str(images / "bad.jpg"), "--out", str(tmp_path / "none"),
                      "--whole_image"])
    assert "none of the 1 images could be read" in str(err.value.code)


def test_predict_dense_keys_outputs_by_relative_path_and_skips_unreadable(seg_checkpoint, dense_root, tmp_path,
                                                                         capsys):
    sources = sorted((dense_root / "val" / "images").iterdir())[:2]
    images = tmp_path / "in"
    for folder, source in zip(["a", "b/c"], sources):
        (images / folder).mkdir(parents=True)
        shutil.copy(source, images / folder / "image.png")
    (images / "a" / "broken.png").write_bytes(b"\x89PNG not really")
    out = predict.main(["--model", str(seg_checkpoint), "--input", str(images), "--out", str(tmp_path / "out")])
    for folder, source in zip(["a", "b/c"], sources):
        labels = cv2.imread(str(out / folder / "image.png"), cv2.IMREAD_UNCHANGED)
        assert labels.shape == cv2.imread(str(source)).shape[:2]
    assert not (out / "a" / "broken.png").exists()
    captured = capsys.readouterr()
    assert "broken.png" in captured.err
    assert captured.out.strip().splitlines()[-1] == (f"seg maps of 2 images -> {out}; 1 images skipped (unreadable or "
                                                     "too large): a/broken.png")


def test_predict_names_the_model_flag_for_a_missing_model(tiny_coco, tmp_path, monkeypatch):
    args = ["--input", str(tiny_coco / "val2017"), "--out", str(tmp_path / "out")]
    with pytest.raises(SystemExit) as err:
        predict.main(["--model", str(tmp_path / "no_such_export"), *args])
    message = str(err.value.code)
    assert message.startswith(f"--model: '{tmp_path / 'no_such_export'}' does not exist")
    assert "pretrained" not in message

    import huggingface_hub

    def offline(*args, **kwargs):
        raise OSError("no connection")

    monkeypatch.setattr(huggingface_hub, "snapshot_download", offline)
    with pytest.raises(SystemExit) as err:
        predict.main(["--model", "someone/missing-model", *args])
    message = str(err.value.code)
    assert "(OSError: no connection)" in message and "pass `--model DIR`" in message and "pretrained" not in message


def test_unwarp_inverts_the_letterbox():
    from datamodules.dense.transforms import DenseTransform

    height, width, size = 90, 160, (64, 48)
    ys, xs = np.mgrid[:height, :width].astype(np.float32)
    ramp = np.stack([xs, ys], axis=-1)
    matrix = DenseTransform(size).matrix((height, width), None)
    warped = affine.warp_image(ramp, matrix, size)
    back = unwarp(torch.from_numpy(warped).permute(2, 0, 1)[None], matrix, size, (height, width))
    back = back[0].permute(1, 2, 0).numpy()
    inner = (slice(4, -4), slice(4, -4))
    assert np.abs(back[inner] - ramp[inner]).max() < 1.0  # within a pixel of the original positions


def test_model_directory_with_a_missing_tensor_is_refused(seg_checkpoint, tmp_path):
    """transformers would initialise a missing tensor at random with a warning; loading refuses instead."""
    from safetensors.torch import load_file, save_file

    from sapiens2_ft.models.factory import WeightsMismatchError

    out = export_checkpoint(seg_checkpoint, tmp_path / "export")
    weights = load_file(out / "model.safetensors")
    dropped = sorted(weights)[len(weights) // 2]  # a backbone tensor (keys use the original Sapiens2 names)
    del weights[dropped]
    save_file(weights, out / "model.safetensors", metadata={"format": "pt"})
    for module in (SegmentationModule(pretrained=str(out), input_size=(128, 96)),
                   SegmentationModule(init_from=str(out), input_size=(128, 96))):
        with pytest.raises(WeightsMismatchError, match=r"missing \(1\): "):
            module.configure_model()


def test_predict_normals_masked_by_a_seg_model(seg_checkpoint, dense_root, tmp_path):
    """--mask_model: the normal picture is black exactly where the seg model sees no person; the .npy keeps
    every pixel."""
    normal = NormalModule(size="tiny", input_size=(128, 96))
    normal.configure_model()
    normal.model.save_pretrained(tmp_path / "normal")
    image = next((dense_root / "val" / "images").iterdir())
    seg_out = predict.main(["--model", str(seg_checkpoint), "--input", str(image), "--out", str(tmp_path / "seg")])
    out = predict.main(["--model", str(tmp_path / "normal"), "--input", str(image), "--out", str(tmp_path / "out"),
                        "--mask_model", str(seg_checkpoint)])
    people = cv2.imread(str(seg_out / f"{image.stem}.png"), cv2.IMREAD_UNCHANGED) > 0
    picture = cv2.imread(str(out / f"{image.stem}_normal.png"))
    assert (picture[~people] == 0).all()
    assert (picture[people].max(axis=1) > 0).all()  # a unit normal never maps to black
    assert np.isfinite(np.load(out / f"{image.stem}.npy").astype(np.float32)).all()
