"""One ``Result`` per image, whatever the task (``sapiens2_ft/predict/result.py``): a pose model's people as arrays
and as dicts agree, a dense model's maps are at the image's size, ``save`` writes what ``predict`` writes byte for
byte, ``to_json`` names the image and what was found, ``plot`` draws it, a stream's track ids are in all of them."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

import sapiens2_ft
from sapiens2_ft import predict as predict_cli


@pytest.fixture(scope="module")
def pose(tiny_pose308_dir):
    return sapiens2_ft.load(tiny_pose308_dir, device="cpu")


def photo(seed: int, size=(80, 60)) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (*size, 3), dtype=np.uint8)


BOXES = np.array([[5.0, 6.0, 30.0, 50.0, 0.9], [20.0, 10.0, 25.0, 40.0, 0.5]])


def test_a_pose_result_holds_its_people_as_arrays_and_as_dicts(pose):
    image = photo(0)
    [result] = pose.predict([image], boxes=[BOXES])
    people = result.people
    assert result.task == "pose" and result.size == (80, 60) and result.maps == {} and result.files == {}
    assert len(people) == 2 and people.keypoints.shape == (2, 308, 2) and people.keypoint_scores.shape == (2, 308)
    np.testing.assert_array_equal(people.keypoints, np.stack([p["points"] for p in people]))
    np.testing.assert_array_equal(people.keypoint_scores, np.stack([p["scores"] for p in people]))
    np.testing.assert_array_equal(people.boxes, BOXES[:, :4])
    np.testing.assert_array_equal(people.scores, [p["score"] for p in people])
    assert people.track_ids.tolist() == [-1, -1]  # not a stream
    found = json.loads(result.to_json())
    assert (found["name"], found["width"], found["height"], found["task"]) == (None, 60, 80, "pose")
    assert [p["bbox"] for p in found["people"]] == BOXES[:, :4].tolist()
    assert list(found["people"][1]["keypoints"]) == pose.labels
    assert found["people"][1]["keypoints"][pose.labels[3]] == pytest.approx(
        [*people.keypoints[1, 3], people.keypoint_scores[1, 3]], abs=0.01)
    picture = result.plot()
    assert picture.shape == image.shape and picture.dtype == np.uint8 and (picture != image).any()
    [nobody] = pose.predict([image], boxes=[np.zeros((0, 4))])
    assert nobody.people.keypoints.shape == (0, 308, 2) and nobody.people.boxes.shape == (0, 4)


def test_a_streamed_result_carries_its_frame_and_its_people_s_track_ids(pose):
    frames = [photo(0)] * 3
    results = list(pose.stream(frames, fps=10, boxes=[BOXES] * 3, batch_size=2))
    assert [(r.frame, r.time) for r in results] == [(0, 0.0), (1, 0.1), (2, 0.2)]
    assert all(r.people.track_ids.tolist() == [0, 1] for r in results)
    found = results[2].to_dict()
    assert (found["frame"], found["time"]) == (2, 0.2) and [p["track_id"] for p in found["people"]] == [0, 1]


def test_save_writes_what_predict_writes_for_pose(pose, tiny_pose308_dir, tmp_path):
    folder = tmp_path / "photos"
    folder.mkdir()
    cv2.imwrite(str(folder / "a.png"), photo(2)[..., ::-1])
    predict_cli.main(["--model", str(tiny_pose308_dir), "--input", str(folder), "--out", str(tmp_path / "cli"),
                      "--whole_image", "--device", "cpu"])
    [result] = pose.predict(folder, boxes="whole_image")
    assert result.name == "a.png"
    result.save(tmp_path / "api")
    for name in ("keypoints.json", "images.json", "overlays/a.jpg"):
        assert (tmp_path / "api" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes(), name


def test_a_dense_result_has_maps_at_the_image_s_size_and_saves_predict_s_files(seg_checkpoint, tmp_path):
    predictor = sapiens2_ft.load(seg_checkpoint, device="cpu")
    folder = tmp_path / "photos"
    folder.mkdir()
    cv2.imwrite(str(folder / "wide.png"), photo(3, (50, 90))[..., ::-1])  # landscape: not the input's 4:3
    [result] = predictor.predict(folder)
    assert result.task == "seg" and result.size == (50, 90) and len(result.people) == 0
    assert result.maps["logits"].shape == (29, 50, 90) and result.files[".png"].shape == (50, 90)
    found = result.to_dict()
    assert (found["name"], found["width"], found["height"]) == ("wide.png", 90, 50)
    assert sum(found["class_areas"].values()) == pytest.approx(1.0, abs=1e-3)
    assert result.plot().shape == (50, 90, 3)
    predict_cli.main(["--model", str(seg_checkpoint), "--input", str(folder), "--out", str(tmp_path / "cli"),
                      "--device", "cpu"])
    result.save(tmp_path / "api")
    for name in ("wide.png", "wide_overlay.png"):
        assert (tmp_path / "api" / name).read_bytes() == (tmp_path / "cli" / name).read_bytes(), name
