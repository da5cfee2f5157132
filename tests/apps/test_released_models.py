"""A released model as a user meets it: the hub repo holds a 308-keypoint ``Sapiens2ForPoseEstimation`` saved with
``save_pretrained`` and nothing beside it (no keypoint file). predict, evaluate and ``sapiens2_ft.load`` take it
with no flag, find the people with the default detector, and give another keypoint set's rows by name."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hub_cache import use_hub_cache

import sapiens2_ft
from datamodules.boundary.images import read_image
from datamodules.errors import BadInput
from datamodules.keypoints.metainfo import load_metainfo
from sapiens2_ft import evaluate, predict
from sapiens2_ft.api import CommandError
from sapiens2_ft.predict.loading import load_inference

RELEASED = "facebook/sapiens2-pose-0.4b"
# REFERENCE: the COCO-17 keypoints are these rows of the 308-keypoint head, in COCO order.
COCO_ROWS_OF_308 = [0, 1, 2, 3, 4, 5, 6, 7, 8, 62, 41, 9, 10, 11, 12, 13, 14]


@pytest.fixture
def hub(released_hub, monkeypatch):
    use_hub_cache(monkeypatch, released_hub)


def test_a_released_pose_model_predicts_with_no_flag(hub, tiny_coco, tmp_path, capsys):
    out = predict.main(["--model", RELEASED, "--input", str(tiny_coco / "val2017"), "--out", str(tmp_path / "out"),
                        "--det_threshold", "0.0"])
    people = json.loads((out / "keypoints.json").read_text())
    assert people and all(len(p["keypoints"]) == 308 * 3 for p in people)
    boxes = {tuple(p["bbox"]) for p in people}  # the detector's boxes, not whole images
    assert all(box != (0.0, 0.0, 192.0, 256.0) for box in boxes) and len(boxes) > 1
    inference, _ = load_inference(RELEASED, tmp_path / "x")
    assert inference.metainfo.name == "sapiens2_308" and inference.metainfo.flip_pairs  # flips and skeleton come along


def test_another_set_is_the_rows_of_the_same_names(hub, tiny_coco, tmp_path):
    whole, _ = load_inference(RELEASED, tmp_path / "a")
    coco, _ = load_inference(RELEASED, tmp_path / "b", keypoints="coco17")
    pixels = torch.randn(2, 3, 256, 192)
    with torch.no_grad():
        all_rows = whole.predict(pixels)["heatmaps"]
        chosen = coco.predict(pixels)["heatmaps"]
    torch.testing.assert_close(chosen, all_rows[:, COCO_ROWS_OF_308])
    names = load_metainfo("sapiens2_308").keypoint_names
    assert [names[k] for k in COCO_ROWS_OF_308] == list(load_metainfo("coco17").keypoint_names)
    predictor = sapiens2_ft.load(RELEASED, keypoints="coco17")
    image = read_image(str(next((tiny_coco / "val2017").iterdir())))
    result = predictor.predict([image], boxes="whole_image")[0]
    assert predictor.labels == list(load_metainfo("coco17").keypoint_names)
    assert result.people[0]["points"].shape == (17, 2)


def test_a_set_with_names_the_model_lacks_is_refused_by_name(hub, tmp_path):
    yaml_set = tmp_path / "mine.yaml"
    yaml_set.write_text("name: mine\nkeypoints: [nose, left_tail, right_tail]\nsigmas: [0.03, 0.05, 0.05]\n")
    with pytest.raises(BadInput, match=r"has no keypoint \['left_tail', 'right_tail'\] \(2 of the 3 asked for\)"):
        load_inference(RELEASED, tmp_path / "x", keypoints=str(yaml_set))


def test_evaluate_scores_the_released_model_on_coco17_by_name(hub, tiny_coco, tmp_path):
    summary = evaluate.main(["--config", "pose_coco.yaml", "--model", RELEASED, "--data.root", str(tiny_coco),
                             "--data.input_size", "[256, 192]", "--data.num_workers", "0", "--data.batch_size", "2",
                             "--out", str(tmp_path / "eval"), "--device", "cpu"])
    assert summary["samples"] == 4 and 0 <= summary["metrics"]["AP"] <= 1
    assert np.isfinite(summary["metrics"]["loss"])


def test_without_a_detector_the_message_names_the_other_box_sources(tiny_pose308_dir, tiny_coco, tmp_path,
                                                                   monkeypatch):
    use_hub_cache(monkeypatch, tmp_path / "empty")  # offline, nothing downloaded: the default detector is missing
    with pytest.raises(SystemExit) as err:
        predict.main(["--model", str(tiny_pose308_dir), "--input", str(tiny_coco / "val2017"),
                      "--out", str(tmp_path / "out")])
    message = str(err.value.code)
    assert message.startswith("the person detector PekingU/rtdetr_r50vd (pose's box source when none is given): "
                              "'PekingU/rtdetr_r50vd' is not in this machine's Hugging Face cache and HF_HUB_OFFLINE "
                              "is set."), message
    for choice in ("`hf download PekingU/rtdetr_r50vd --local-dir DIR`", "--detector DIR", "--boxes FILE",
                   "--boxes_from_seg", "--whole_image"):
        assert choice in message, message
    assert "gated" not in message and "Traceback" not in message  # RT-DETR is open (Apache-2.0)
    with pytest.raises(CommandError) as err:  # the Python API says the same with its own names
        sapiens2_ft.load(str(tiny_pose308_dir)).predict(str(tiny_coco / "val2017"))
    assert "gated" not in str(err.value) and "boxes='whole_image'" in str(err.value) and "hf download" in str(err.value)
    out = predict.main(["--model", str(tiny_pose308_dir), "--input", str(tiny_coco / "val2017"),
                        "--out", str(tmp_path / "whole"), "--whole_image"])
    assert len(json.loads((out / "keypoints.json").read_text())) == 2  # one person per image


def test_openpose_25_from_the_released_model_lacks_only_mid_hip(hub, tmp_path):
    """The built-in OpenPose-25 set by name: the 308 rows hold 24 of its keypoints; the hips' midpoint is named."""
    with pytest.raises(BadInput, match=r"has no keypoint \['mid_hip'\] \(1 of the 25 asked for\)"):
        load_inference(RELEASED, tmp_path / "x", keypoints="openpose25")
