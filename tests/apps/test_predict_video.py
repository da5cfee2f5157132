"""Video in and out: a short clip written from synthetic frames goes through predict; the output keeps the frame
count and rate, and people keep their track ids while they move."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from datamodules.boundary.images import read_image
from sapiens2_ft import predict
from sapiens2_ft.predict.video import IoUTracker

FPS, FRAMES, STEP = 12.5, 6, 4  # the clip: the image slides STEP px right per frame


@pytest.fixture()
def clip(tiny_coco, tmp_path):
    """FRAMES frames of a tiny_coco val image sliding right, as an mp4 and as a folder of PNGs; and the two
    people's boxes per frame."""
    image = read_image(str(tiny_coco / "val2017" / "000000.jpg"))
    coco = json.loads((tiny_coco / "annotations" / "person_keypoints_val2017.json").read_text())
    boxes = np.array([a["bbox"] for a in coco["annotations"] if a["image_id"] == 1])
    height, width = image.shape[:2]
    writer = cv2.VideoWriter(str(tmp_path / "clip.mp4"), cv2.VideoWriter_fourcc(*"mp4v"), FPS, (width, height))
    (tmp_path / "frames").mkdir()
    per_frame = []
    for f in range(FRAMES):
        frame = np.roll(image, STEP * f, axis=1)
        writer.write(frame[..., ::-1].copy())
        cv2.imwrite(str(tmp_path / "frames" / f"{f:03d}.png"), frame[..., ::-1])
        moved = boxes + [STEP * f, 0, 0, 0]
        per_frame.append(moved if f % 2 == 0 else moved[::-1])  # the detector lists them in either order
    writer.release()
    return tmp_path, per_frame


@pytest.fixture()
def moving_detector(clip, monkeypatch):
    boxes = iter(clip[1])

    class Stub:
        def __init__(self, *args):
            pass

        def __call__(self, images):
            return [np.concatenate([next(boxes), np.ones((2, 1))], axis=1) for _ in images]

    monkeypatch.setattr("sapiens2_ft.predict.boxes.PersonDetector", Stub)


def test_a_clip_gives_a_video_and_tracked_people(pose_run, clip, moving_detector, tmp_path):
    root, boxes = clip
    out = predict.main(["--model", str(pose_run[0] / "export"), "--input", str(root / "clip.mp4"),
                        "--out", str(tmp_path / "out"), "--detector", "stub", "--batch_size", "4"])
    video = cv2.VideoCapture(str(out / "clip.mp4"))
    assert video.get(cv2.CAP_PROP_FPS) == pytest.approx(FPS)
    count = 0
    while video.read()[0]:
        count += 1
    assert count == FRAMES
    records = json.loads((out / "clip.json").read_text())
    assert records["fps"] == pytest.approx(FPS) and [r["frame"] for r in records["frames"]] == list(range(FRAMES))
    first = {p["track_id"]: p["bbox"][0] for p in records["frames"][0]["people"]}
    assert sorted(first) == [0, 1]
    for f, record in enumerate(records["frames"]):  # each track follows its own person
        for person in record["people"]:
            assert person["bbox"][0] == pytest.approx(first[person["track_id"]] + STEP * f, abs=0.01)
            assert len(person["keypoints"]) == 17 * 3


def test_a_folder_of_frames_is_a_video_at_the_given_rate(pose_run, clip, tmp_path):
    out = predict.main(["--model", str(pose_run[0] / "export"), "--input", str(clip[0] / "frames"), "--video",
                        "--fps", "5", "--out", str(tmp_path / "out"), "--whole_image"])
    video = cv2.VideoCapture(str(out / "frames.mp4"))
    assert video.get(cv2.CAP_PROP_FPS) == pytest.approx(5)
    assert len(json.loads((out / "frames.json").read_text())["frames"]) == FRAMES


def test_an_unreadable_video_is_a_clear_error(pose_run, tmp_path):
    (tmp_path / "broken.mp4").write_bytes(b"not a video" * 100)
    with pytest.raises(SystemExit, match="cannot be read as a video"):
        predict.main(["--model", str(pose_run[0] / "export"), "--input", str(tmp_path / "broken.mp4"),
                      "--out", str(tmp_path / "out")])


def test_tracker_keeps_ids_across_order_and_ends_old_tracks():
    tracker = IoUTracker(min_iou=0.3, max_age=2)
    a, b = np.array([0.0, 0, 10, 20]), np.array([50.0, 0, 10, 20])
    assert tracker.update(np.stack([a, b])) == [0, 1]
    assert tracker.update(np.stack([b + [2, 0, 0, 0], a + [2, 0, 0, 0]])) == [1, 0]
    assert tracker.update(np.zeros((0, 4))) == []
    assert tracker.update(np.stack([a + [3, 0, 0, 0]])) == [0]  # back after one missing frame: same id
    for _ in range(3):
        tracker.update(np.zeros((0, 4)))
    assert tracker.update(np.stack([a])) == [2]  # gone longer than max_age: a new track
