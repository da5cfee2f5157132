"""The Python API (sapiens2_ft/api.py): ``train`` with keyword overrides, ``load(...).predict`` giving what
``python -m sapiens2_ft.predict`` writes (pose and a dense task), ``export``, and errors as exceptions."""

from __future__ import annotations

import json
import os
from pathlib import Path

import cv2
import numpy as np
import pytest

import sapiens2_ft
from sapiens2_ft import predict as predict_cli
from datamodules.errors import BadConfig, BadInput, NotFound, Sapiens2FTError
from sapiens2_ft.api import CommandError, override_args
from sapiens2_ft.problems import ArgumentProblems


def test_overrides_become_command_line_keys():
    assert override_args({"trainer__max_steps": 2, "model__optim__lr": 1e-4, "run_dir": Path("runs/x"),
                          "data__input_size": [256, 192], "ema__decay": None, "export": False,
                          "trainer__precision": "bf16-mixed"}) == [
        "--trainer.max_steps", "2", "--model.optim.lr", "0.0001", "--run_dir", "runs/x",
        "--data.input_size", "[256, 192]", "--ema.decay", "null", "--export", "false",
        "--trainer.precision", "bf16-mixed"]


@pytest.fixture(scope="module")
def api_pose_run(tiny_coco, tiny_pose308_dir, tmp_path_factory) -> dict:
    """A 2-step pose run through ``sapiens2_ft.train`` (the tiny setup of tests/conftest.py)."""
    run_dir = tmp_path_factory.mktemp("api_run") / "run"
    return sapiens2_ft.train(
        config="pose_coco.yaml", run_dir=run_dir, model__pretrained=str(tiny_pose308_dir),
        data__root=str(tiny_coco), data__input_size=[256, 192], model__sigma=2, data__batch_size=2,
        data__num_workers=0, trainer__max_steps=2, trainer__val_check_interval=2, trainer__accelerator="cpu",
        trainer__devices=1, trainer__enable_progress_bar=False, tracking__logger="csv")


@pytest.mark.slow  # a training run: the fast tier keeps this file's unit tests
def test_train_load_predict_pose_as_the_command_does(api_pose_run, tiny_coco, tmp_path):
    summary = api_pose_run
    assert summary["global_step"] == 2 and Path(summary["export"], "config.json").is_file()
    predictor = sapiens2_ft.load(summary["export"])
    assert predictor.task == "pose" and len(predictor.labels) == 17
    ann_file = tiny_coco / "annotations" / "person_keypoints_val2017.json"
    coco = json.loads(ann_file.read_text())
    images = tiny_coco / "val2017"
    boxes = [[a["bbox"] for a in coco["annotations"] if a["image_id"] == im["id"]] for im in coco["images"]]
    results = predictor.predict(images, boxes=boxes)
    assert [r.name for r in results] == [im["file_name"] for im in coco["images"]]
    assert [len(r.people) for r in results] == [len(b) for b in boxes]
    predict_cli.main(["--model", summary["export"], "--input", str(images), "--out", str(tmp_path),
                      "--boxes", str(ann_file)])
    written = json.loads((tmp_path / "keypoints.json").read_text())
    ours = np.array([np.concatenate([p["points"], p["scores"][:, None]], 1).reshape(-1)
                     for r in results for p in r.people])
    theirs = np.array([w["keypoints"] for w in written])
    np.testing.assert_allclose(ours, theirs, atol=0.006)  # points written to 0.01 px
    assert (ours[:, 2::3] == theirs[:, 2::3]).all()  # scores: the same numbers (tests/apps/test_keypoint_scores.py)
    arrays = [cv2.cvtColor(cv2.imread(str(images / im["file_name"])), cv2.COLOR_BGR2RGB) for im in coco["images"]]
    again = predictor.predict(arrays, boxes=boxes)
    assert again[0].name is None
    np.testing.assert_allclose(again[1].people[0]["points"], results[1].people[0]["points"])


@pytest.mark.slow  # two training runs
def test_two_runs_in_one_process_get_their_own_run_directories(tiny_coco, tiny_pose308_dir, tmp_path, monkeypatch):
    """The run directory handed to launched ranks (an environment variable) does not outlive its run: a second
    ``train`` in the same process, in the same second, starts a new run instead of refusing the first's folder."""
    from sapiens2_ft.training.run_dir import RUN_DIR_ENV

    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv(RUN_DIR_ENV, raising=False)
    args = dict(model__pretrained=str(tiny_pose308_dir), data__root=str(tiny_coco), data__input_size=[256, 192],
                data__batch_size=2, data__num_workers=0, trainer__max_steps=1, trainer__accelerator="cpu",
                trainer__devices=1, trainer__enable_progress_bar=False, tracking__logger="csv", export=False)
    first = sapiens2_ft.train("pose_coco.yaml", **args)
    second = sapiens2_ft.train("pose_coco.yaml", **args)
    assert RUN_DIR_ENV not in os.environ
    assert first["run_dir"] != second["run_dir"] and Path(first["run_dir"]).parent == Path(second["run_dir"]).parent
    assert all((Path(s["run_dir"]) / "summary.json").is_file() for s in (first, second))


def test_load_a_checkpoint_and_predict_a_dense_task(seg_checkpoint, dense_root, tmp_path):
    predictor = sapiens2_ft.load(seg_checkpoint)  # exported to a temporary folder first, as predict does
    assert predictor.task == "seg" and len(predictor.labels) == 29
    image = next((dense_root / "val" / "images").iterdir())
    [result] = predictor.predict([image])
    height, width = cv2.imread(str(image)).shape[:2]
    assert result.maps["logits"].shape == (29, height, width)
    np.testing.assert_array_equal(result.files[".png"], result.maps["logits"].argmax(0))
    predict_cli.main(["--model", str(seg_checkpoint), "--input", str(image), "--out", str(tmp_path)])
    written = cv2.imread(str(tmp_path / f"{image.stem}.png"), cv2.IMREAD_UNCHANGED)
    np.testing.assert_array_equal(written, result.files[".png"])
    with pytest.raises(ValueError, match="boxes are for pose models"):
        predictor.predict([image], boxes=[[[0, 0, 10, 10]]])
    with pytest.raises(ValueError, match=r"image 0: expected an RGB uint8 array"):
        predictor.predict([np.zeros((8, 8), np.uint8)])


def test_export_is_the_module_and_the_function(seg_checkpoint, tmp_path):
    import sapiens2_ft.export as export_module

    assert sapiens2_ft.export is export_module  # callable, whichever was imported first
    out = sapiens2_ft.export(seg_checkpoint, tmp_path / "model")
    assert out == tmp_path / "model" and (out / "config.json").is_file() and (out / "model.safetensors").is_file()


def test_errors_are_exceptions(tmp_path):
    """The library's typed errors, not the commands' exits: a notebook's ``except Exception`` catches them."""
    with pytest.raises(NotFound, match="^config 'no_such_recipe.yaml' not found"):
        sapiens2_ft.train("no_such_recipe.yaml")
    with pytest.raises(BadConfig, match="trainer__no_such_key|trainer.no_such_key"):  # the parser's: no exit
        sapiens2_ft.train("pose_demo.yaml", trainer__no_such_key=1)
    with pytest.raises(NotFound, match="--model: '.*missing' does not exist"):
        sapiens2_ft.load(tmp_path / "missing")
    with pytest.raises(BadInput, match=r"^precision: one of auto, fp32, bf16, got 'fp16'$"):
        sapiens2_ft.load(tmp_path / "missing", precision="fp16")
    assert CommandError is Sapiens2FTError  # the name of earlier releases catches them all
    with pytest.raises(AttributeError, match="has no attribute 'trian'"):
        sapiens2_ft.trian


@pytest.fixture(scope="module")
def pose(tiny_pose308_dir):
    return sapiens2_ft.load(tiny_pose308_dir, device="cpu")


IMAGE = np.full((64, 48, 3), 127, np.uint8)


@pytest.mark.parametrize("boxes,message", [
    ([[np.nan, 0, -5, 1e30]], r"boxes of image 1, row 0: 'bbox' must be \[x, y, w, h\] of finite numbers, got "
                              r"\[nan, 0.0, -5.0, 1e\+30\]"),
    ([[2, 2, 20, 30], [0, 0, 0, 10]], r"boxes of image 1, row 1: 'bbox' \[x, y, w, h\] needs w, h > 0 and values "
                                      r"within \+-1e\+06 pixels, got \[0.0, 0.0, 0.0, 10.0\]"),
    ([[0, 0, 5, 2e6]], r"boxes of image 1, row 0: .* needs w, h > 0 and values within \+-1e\+06 pixels"),
    ([[0, 0, 5, 5, np.inf]], r"boxes of image 1, row 0: 'score' must be a finite number, got inf"),
    ([[0, 0, 5]], r"boxes of image 1: expected \[x, y, w, h\] or \[x, y, w, h, score\] rows, got shape \(1, 3\)"),
])
def test_a_bad_box_is_an_error_naming_it_as_a_boxes_file_s_would_be(pose, boxes, message):
    """Issue 61: NaN, infinite, huge and zero-size boxes gave NaN keypoints (and divide-by-zero warnings), no error.
    The rule is the ``--boxes`` file's (``predict.boxes.box_problem``), for arrays, a callable's and a stream's."""
    given = [np.array([[0, 0, 48, 64]]), np.array(boxes, dtype=np.float64)]
    with pytest.raises(BadInput, match=message):
        pose.predict([IMAGE, IMAGE], boxes=given)
    with pytest.raises(BadInput, match=message):
        pose.predict([IMAGE, IMAGE], boxes=lambda images: given)
    with pytest.raises(BadInput, match=message):
        list(pose.stream([IMAGE, IMAGE], boxes=given, batch_size=1))


def test_the_api_checks_its_arguments_with_the_command_s_words(pose, tiny_pose308_dir, tmp_path):
    """One check for both: every problem at once, each worded as predict's (its flag without the dashes)."""
    cv2.imwrite(str(tmp_path / "a.png"), IMAGE)
    with pytest.raises(SystemExit) as command:
        predict_cli.main(["--model", str(tiny_pose308_dir), "--input", str(tmp_path / "a.png"),
                          "--out", str(tmp_path / "out"), "--batch_size", "0", "--focal", "-3"])
    with pytest.raises(ArgumentProblems) as api:
        pose.predict([IMAGE], boxes=[np.zeros((0, 4))], batch_size=0, focal=-3.0)
    assert api.value.problems[:2] == [p.removeprefix("  - --") for p in str(command.value.code).splitlines()[1:]]
    assert api.value.problems[2] == "focal is for pointmap models; pose do not take a focal"
    with pytest.raises(BadInput, match=r"^boxes: 1 entries for 2 images \(one array per image\)$"):
        pose.predict([IMAGE, IMAGE], boxes=[np.zeros((0, 4))])
    with pytest.raises(BadInput, match=r"^image 0: expected an RGB uint8 array \(H, W, 3\) of at least one pixel"):
        pose.predict([np.zeros((0, 48, 3), np.uint8)], boxes="whole_image")
    with pytest.raises(BadInput, match=r"^boxes: 'whole' is not a box source"):
        pose.predict([IMAGE], boxes="whole")
    with pytest.raises(ArgumentProblems, match="fps: frames per second must be > 0, got 0"):
        next(pose.stream([IMAGE], fps=0, boxes="whole_image"))


def test_bf16_autocast_is_one_rule_for_predict_the_api_and_the_app():
    from sapiens2_ft.predict.options import uses_bf16

    assert [uses_bf16(*case) for case in [("auto", "cuda"), ("auto", "cpu"), ("auto", "cuda", "onnxruntime"),
                                          ("bf16", "cpu"), ("fp32", "cuda"), ("auto", "cuda:1")]] == [
        True, False, False, True, False, True]
