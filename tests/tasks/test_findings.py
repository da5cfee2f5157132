"""``TaskModule.findings``: what one image's prediction found, as plain JSON (the web demo's answer)."""

from __future__ import annotations

import json

import numpy as np

from sapiens2_ft.tasks.registry import TASKS, import_class


def module(task: str):
    return import_class(TASKS[task].module)(size="tiny", input_size=(64, 48))


def test_pose_people_name_their_keypoints():
    people = [{"points": np.arange(34, dtype=float).reshape(17, 2), "scores": np.linspace(0, 1, 17),
               "score": 0.75, "bbox": np.array([1.0, 2.0, 30.0, 40.0])}]
    found = module("pose").findings(people)
    person = found["people"][0]
    assert person["bbox"] == [1.0, 2.0, 30.0, 40.0] and person["score"] == 0.75
    assert person["keypoints"]["nose"] == [0.0, 1.0, 0.0] and person["keypoints"]["right_ankle"] == [32.0, 33.0, 1.0]
    assert json.loads(json.dumps(found)) == found


def test_dense_findings():
    labels = np.zeros((4, 10), np.uint8)
    labels[:, :3], labels[:, 3] = 22, 4  # torso 30 %, hair 10 %
    assert module("seg").findings({".png": labels}) == {"class_areas": {"Background": 0.6, "Torso": 0.3, "Hair": 0.1}}
    alpha = np.zeros((4, 10), np.uint8)
    alpha[:, :4] = 255
    assert module("matting").findings({"_alpha.png": alpha}) == {"foreground_area": 0.4}
    xyz = np.zeros((2, 2, 3), np.float32)
    xyz[..., 2] = [[1.0, 2.0], [4.0, np.nan]]
    assert module("pointmap").findings({".npy": xyz}) == {"depth_m": {"min": 1.0, "median": 2.0, "max": 4.0}}
    assert module("normal").findings({".npy": xyz}) == {}

