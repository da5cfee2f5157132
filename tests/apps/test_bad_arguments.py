"""Every bad argument is a message naming what is wrong, before anything runs: boxes files (NaN, unknown image ids,
degenerate or huge boxes), ``--fps``, a checkpoint refused by ``export``, the synthetic renderer's refusal; and a
model directory's own code is never run nor asked about (``trust_remote_code=False``)."""

from __future__ import annotations

import builtins
import json

import pytest
import torch

from datamodules.errors import BadInput
from sapiens2_ft import check_data, export
from sapiens2_ft.models.detector import DetectorError, PersonDetector
from sapiens2_ft.predict import cli as predict
from sapiens2_ft.predict.boxes import read_boxes
from sapiens2_ft.training import cli as train


@pytest.mark.parametrize("boxes,message", [
    ([{"file_name": "a.jpg", "bbox": [0, 0, float("nan"), 10]}], r"entry 0: 'bbox' must be \[x, y, w, h\] of finite"),
    ([{"file_name": "a.jpg", "bbox": [0, 0, -5, 1e30]}], r"entry 0: 'bbox' \[x, y, w, h\] needs w, h > 0 and values "
                                                          r"within \+-1e\+06 pixels, got \[0, 0, -5, 1e\+30\]"),
    ([{"file_name": "a.jpg", "bbox": [0, 0, 10, 1e30]}], r"entry 0: .*within \+-1e\+06 pixels"),
    ([{"file_name": "a.jpg", "bbox": [0, 0, 10, 10], "score": float("inf")}], r"entry 0: 'score' must be a finite"),
    ({"images": [{"id": 1, "file_name": "a.jpg"}], "annotations": [{"id": 7, "image_id": 2, "bbox": [0, 0, 5, 5]}]},
     r"annotation 7: image_id 2 is not an id of 'images'"),
])
def test_bad_boxes_are_named_before_anything_runs(tmp_path, boxes, message):
    path = tmp_path / "boxes.json"
    path.write_text(json.dumps(boxes))  # NaN and Infinity as Python's json writes (and reads) them
    with pytest.raises(BadInput, match=rf"--boxes {path}: {message}"):
        read_boxes(path, ["a.jpg"])


def test_fps_must_be_positive(tmp_path):
    with pytest.raises(SystemExit, match="--fps: frames per second must be > 0, got -5.0"):
        predict.main(["--model", "m", "--input", str(tmp_path), "--out", str(tmp_path / "out"), "--fps", "-5"])


def test_export_refuses_a_checkpoint_with_objects_in_a_message(tmp_path):
    checkpoint = tmp_path / "other.ckpt"
    torch.save({"state_dict": {}, "callbacks": {"x": DetectorError("an object")}}, checkpoint)
    with pytest.raises(SystemExit, match=r"export: cannot read checkpoint .*other\.ckpt as tensors and plain data "
                                         r"\(UnpicklingError: .*Unsupported global.*DetectorError"):
        export.main(["--checkpoint", str(checkpoint), "--out", str(tmp_path / "out")])


def test_the_synthetic_renderer_s_refusal_is_a_message(tmp_path):
    other = tmp_path / "mine"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit, match=r"check_data: data.synthetic: refusing to write into .*mine: it is not empty"):
        check_data.main(["--config", "pose_demo.yaml", "--data.root", str(other)])
    with pytest.raises(SystemExit, match=r"data: data.synthetic: refusing to write into .*mine"):
        train.main(["--config", "pose_demo.yaml", "--data.root", str(other), "--run_dir", str(tmp_path / "run"),
                    "--trainer.max_steps", "1", "--tracking.logger", "csv"])
    assert [p.name for p in other.iterdir()] == ["notes.txt"]


def test_a_detector_s_own_code_is_neither_run_nor_asked_about(tmp_path, monkeypatch):
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "other_detector", "auto_map": {
        "AutoConfig": "other.Config", "AutoModelForObjectDetection": "other.Model"}}))
    (tmp_path / "preprocessor_config.json").write_text(json.dumps({"image_processor_type": "Processor", "auto_map": {
        "AutoImageProcessor": "other.Processor"}}))
    (tmp_path / "other.py").write_text(f"open({str(tmp_path / 'ran')!r}, 'w').close()\n")
    asked = []
    monkeypatch.setattr(builtins, "input", lambda *args: asked.append(args) or "y")  # someone answering yes
    with pytest.raises(DetectorError, match="contains custom code"):
        PersonDetector(str(tmp_path))
    assert not asked and not (tmp_path / "ran").exists()
