"""Temporal smoothing (``sapiens2_ft/predict/smoothing.py``): the One-Euro filter and the map blend against values
worked out by hand, the options' checks, and ``predict --smooth`` on a still, noisy clip against a reference
One-Euro filter written out from the paper (Casiez, Roussel and Vogel, CHI 2012)."""

from __future__ import annotations

import argparse
import json
import math

import cv2
import numpy as np
import pytest
import torch

import sapiens2_ft
from datamodules.errors import BadInput
from sapiens2_ft import predict
from sapiens2_ft.predict.smoothing import (KeypointSmoother, MapBlend, OneEuroFilter, SmoothOptions,
                                           add_smooth_arguments, smooth_options)

A_10HZ_1 = 0.6283185 / 1.6283185  # r / (r + 1), r = 2 pi x 1 Hz x 0.1 s


def test_one_euro_by_hand():
    """At 10 frames/s, cutoff 1 Hz: each output moves a = 0.3859 of the way to the input. With beta 1 the step 0 -> 1
    is a speed of 10 /s, low-passed to 3.859, so the cutoff is 4.859 Hz and a = 0.75326."""
    still = OneEuroFilter(min_cutoff=1.0, beta=0.0)
    out = [still(np.array([[x, 0.0]]), t / 10)[0, 0] for t, x in enumerate([0.0, 1.0, 1.0])]
    assert out == pytest.approx([0.0, A_10HZ_1, A_10HZ_1 + A_10HZ_1 * (1 - A_10HZ_1)], abs=1e-6)
    assert A_10HZ_1 == pytest.approx(0.385869, abs=1e-6)
    fast = OneEuroFilter(min_cutoff=1.0, beta=1.0, d_cutoff=1.0)
    fast(np.array([[0.0, 0.0]]), 0.0)
    r = 2 * math.pi * (1 + 10 * A_10HZ_1) * 0.1
    assert fast(np.array([[1.0, 0.0]]), 0.1)[0, 0] == pytest.approx(r / (r + 1), abs=1e-6)
    assert r / (r + 1) == pytest.approx(0.75326, abs=1e-5)


def test_one_euro_speed_is_the_points_speed_in_units_of_scale():
    """A step of (3, 4) is a speed of 5 (not 3 or 4 per coordinate); with scale 5 it is 1 unit per second."""
    a, b = OneEuroFilter(1.0, 1.0, d_cutoff=1.0), OneEuroFilter(1.0, 1.0, d_cutoff=1.0)
    start = np.zeros((2, 2))
    a(start, 0.0), b(start, 0.0)
    step = np.array([[0.3, 0.4], [0.0, 0.0]])  # the second point stays: its own cutoff, 1 Hz
    moved = a(step, 0.1)
    speed = 5.0 * A_10HZ_1  # 0.5 / 0.1 s, low-passed
    r = 2 * math.pi * (1 + speed) * 0.1
    np.testing.assert_allclose(moved[0], step[0] * r / (r + 1), atol=1e-9)
    np.testing.assert_allclose(moved[1], [0, 0])
    r5 = 2 * math.pi * (1 + speed / 5) * 0.1
    np.testing.assert_allclose(b(step, 0.1, scale=5.0)[0], step[0] * r5 / (r5 + 1), atol=1e-9)


def test_a_still_point_converges_and_time_going_back_restarts():
    f = OneEuroFilter(1.0, 0.0)
    for t in range(60):
        last = f(np.array([[2.0, 3.0]]) if t else np.zeros((1, 2)), t / 30)
    np.testing.assert_allclose(last, [[2.0, 3.0]], atol=1e-3)
    np.testing.assert_array_equal(f(np.array([[7.0, 7.0]]), 0.0), [[7.0, 7.0]])


def test_tracks_are_filtered_apart_and_a_lost_track_starts_afresh():
    smooth = KeypointSmoother(SmoothOptions(min_cutoff=1.0, beta=0.0), max_age=0.5)
    people = lambda x: [{"track_id": 0, "points": np.array([[x, 0.0]]), "bbox": [0, 0, 10, 10]},  # noqa: E731
                        {"track_id": 1, "points": np.array([[-x, 0.0]]), "bbox": [0, 0, 10, 10]}]
    smooth(people(0.0), 0.0)
    second = people(1.0)
    smooth(second, 0.1)
    assert second[0]["points"][0, 0] == pytest.approx(A_10HZ_1) and second[1]["points"][0, 0] == pytest.approx(
        -A_10HZ_1)
    later = [{"track_id": 0, "points": np.array([[5.0, 0.0]]), "bbox": [0, 0, 10, 10]}]
    smooth(later, 1.0)  # unseen for 0.9 s > max_age: its first frame again
    assert later[0]["points"][0, 0] == 5.0 and set(smooth.filters) == {0}


def test_map_blend_by_hand():
    blend = MapBlend(0.5)
    outs = [blend({"alpha": torch.full((1, 1, 2, 2), v)})["alpha"][0, 0, 0, 0].item() for v in (0.0, 2.0, 2.0)]
    assert outs == [0.0, 1.0, 1.5]
    assert blend({"alpha": torch.zeros(1, 1, 3, 3)})["alpha"].sum() == 0  # another size: starts again
    off = MapBlend(1.0)
    assert [off({"a": torch.tensor(v)})["a"].item() for v in (0.0, 2.0)] == [0.0, 2.0]


def _args(*argv):
    parser = argparse.ArgumentParser()
    add_smooth_arguments(parser)
    return parser.parse_args(list(argv))


def test_options_from_the_command_line_and_their_errors():
    assert smooth_options(_args(), video=True, pose=True) is None
    assert smooth_options(_args("--smooth"), video=True, pose=True) == SmoothOptions()
    maps_only = smooth_options(_args("--smooth_maps", "0.5"), video=True, pose=False)
    assert not maps_only.keypoints and maps_only.map_weight == 0.5
    for argv, video, pose, message in [
        (["--smooth"], False, True, "are for videos"),
        (["--smooth_beta", "2"], True, True, "add --smooth"),
        (["--smooth"], True, False, "no --model is a pose model"),
        (["--smooth", "--smooth_min_cutoff", "0"], True, True, "--smooth_min_cutoff: min_cutoff must be > 0"),
        (["--smooth_maps", "1.5"], True, False, r"--smooth_maps: map_weight must be in \(0, 1\]"),
    ]:
        with pytest.raises(BadInput, match=message):
            smooth_options(_args(*argv), video=video, pose=pose)


def reference_one_euro(track: np.ndarray, fps: float, min_cutoff: float, beta: float, d_cutoff: float,
                       heights: np.ndarray) -> np.ndarray:
    """The 1-euro filter as the paper's pseudo-code has it, one keypoint and one frame at a time, with the speed of
    the 2-D point in heights per second. ``track`` (T, K, 2)."""
    def alpha(cutoff):
        tau, te = 1.0 / (2 * math.pi * cutoff), 1.0 / fps
        return 1.0 / (1.0 + tau / te)

    out = track.astype(np.float64).copy()
    for k in range(track.shape[1]):
        x_hat, dx_hat = track[0, k].astype(np.float64), np.zeros(2)
        for t in range(1, len(track)):
            dx = (track[t, k] - x_hat) * fps
            dx_hat = alpha(d_cutoff) * dx + (1 - alpha(d_cutoff)) * dx_hat
            cutoff = min_cutoff + beta * np.hypot(*dx_hat) / heights[t]
            x_hat = alpha(cutoff) * track[t, k] + (1 - alpha(cutoff)) * x_hat
            out[t, k] = x_hat
    return out


def _points(records) -> tuple[np.ndarray, np.ndarray]:
    """(T, K, 2) keypoints of the one person of each frame and (T,) box heights."""
    people = [frame["people"][0] for frame in records["frames"]]
    assert {p["track_id"] for p in people} == {0}
    return (np.array([np.reshape(p["keypoints"], (-1, 3))[:, :2] for p in people]),
            np.array([p["bbox"][3] for p in people]))


def test_predict_smooth_filters_the_keypoints_of_a_still_noisy_clip(pose_run, tiny_coco, tmp_path):
    """Eight frames of one still image with fresh noise each: ``--smooth`` writes the reference filter of the
    unfiltered keypoints (to their 0.01 px rounding) and they jitter less; ``Predictor.stream`` gives the same."""
    image = cv2.imread(str(sorted((tiny_coco / "val2017").iterdir())[0]))
    rng = np.random.default_rng(0)
    (tmp_path / "frames").mkdir()
    for f in range(8):
        noisy = np.clip(image + rng.normal(0, 12, image.shape), 0, 255).astype(np.uint8)
        cv2.imwrite(str(tmp_path / "frames" / f"{f:03d}.png"), noisy)
    common = ["--model", str(pose_run[0] / "export"), "--input", str(tmp_path / "frames"), "--video", "--fps", "10",
              "--workers", "0", "--whole_image"]
    raw_out = predict.main([*common, "--out", str(tmp_path / "raw")])
    smooth_out = predict.main([*common, "--out", str(tmp_path / "smooth"), "--smooth", "--smooth_beta", "0.5"])
    raw, heights = _points(json.loads((raw_out / "frames.json").read_text()))
    records = json.loads((smooth_out / "frames.json").read_text())
    smoothed, _ = _points(records)
    assert records["smooth"] == {**vars(SmoothOptions()), "beta": 0.5}
    expected = reference_one_euro(raw, 10.0, SmoothOptions().min_cutoff, 0.5, SmoothOptions().d_cutoff, heights)
    np.testing.assert_allclose(smoothed, expected, atol=0.03)

    def jitter(x):
        return np.linalg.norm(x[2:] - 2 * x[1:-1] + x[:-2], axis=-1).mean()

    assert jitter(raw) > 0 and jitter(smoothed) < 0.6 * jitter(raw)

    frames = sorted((tmp_path / "frames").iterdir())
    stream = list(sapiens2_ft.load(pose_run[0] / "export").stream(frames, fps=10, boxes="whole_image",
                                                                   smooth=SmoothOptions(beta=0.5), batch_size=3))
    assert [(r.frame, r.time, r.name) for r in stream] == [(f, f / 10, str(p)) for f, p in enumerate(frames)]
    assert all([p["track_id"] for p in r.people] == [0] for r in stream)
    np.testing.assert_allclose([r.people[0]["points"] for r in stream], smoothed, atol=0.006)


def test_stream_blends_dense_maps(seg_checkpoint, dense_root):
    """``map_weight`` 0.5: each frame's logits are half its own and half the previous output, and the class map
    written is that blend's."""
    predictor = sapiens2_ft.load(seg_checkpoint)
    image = cv2.imread(str(sorted((dense_root / "val" / "images").iterdir())[0]))[..., ::-1]
    frames = [np.ascontiguousarray(np.roll(image, 6 * k, axis=1)) for k in range(3)]
    single = [r.maps["logits"] for r in predictor.predict(frames)]
    stream = list(predictor.stream(iter(frames), smooth=SmoothOptions(keypoints=False, map_weight=0.5), batch_size=2))
    expected = single[0]
    for k, result in enumerate(stream):
        expected = single[0] if k == 0 else 0.5 * single[k] + 0.5 * expected
        np.testing.assert_allclose(result.maps["logits"], expected, atol=1e-5)
        np.testing.assert_array_equal(result.files[".png"], expected.argmax(0))
    assert not np.allclose(stream[2].maps["logits"], single[2], atol=1e-3)
    with pytest.raises(ValueError, match="smooth: map_weight must be in"):
        next(predictor.stream(frames, smooth=SmoothOptions(map_weight=0.0)))


def test_predict_smooth_maps_blends_each_frame_of_a_dense_video(seg_checkpoint, dense_root, tmp_path, monkeypatch):
    """``--smooth_maps`` on a seg model's video: every frame's maps go through the blend before anything uses them,
    and the json records the setting."""
    import sapiens2_ft.predict.video as video

    blended = []

    class Spy(MapBlend):
        def __call__(self, maps):
            out = super().__call__(maps)
            blended.append((maps["logits"].shape, self.weight))
            return out

    monkeypatch.setattr(video, "MapBlend", Spy)
    (tmp_path / "frames").mkdir()
    image = cv2.imread(str(sorted((dense_root / "val" / "images").iterdir())[0]))
    for f in range(3):
        cv2.imwrite(str(tmp_path / "frames" / f"{f:03d}.png"), np.roll(image, 5 * f, axis=1))
    out = predict.main(["--model", str(seg_checkpoint), "--input", str(tmp_path / "frames"), "--video",
                        "--out", str(tmp_path / "out"), "--smooth_maps", "0.5", "--workers", "0"])
    assert len(blended) == 3 and {w for _, w in blended} == {0.5}
    assert json.loads((out / "frames.json").read_text())["smooth"]["map_weight"] == 0.5


def test_d_cutoff_low_passes_the_speed_apart_from_min_cutoff():
    """The speed that raises the cutoff is low-passed at ``d_cutoff``, its own option: a moving track filtered with
    d_cutoff 8 Hz and min_cutoff 0.5 Hz is the paper's filter with those two, which differs from the filter whose
    speed is low-passed at min_cutoff by pixels (the defaults set the two equal, so only another value tells)."""
    rng = np.random.default_rng(0)
    track = 100 + np.cumsum(rng.normal(0, 3, (12, 3, 2)), axis=0)  # 12 frames of 3 keypoints wandering
    heights = np.full(len(track), 50.0)
    smoother = KeypointSmoother(SmoothOptions(min_cutoff=0.5, beta=2.0, d_cutoff=8.0))
    smoothed = []
    for t, points in enumerate(track):
        people = [{"track_id": 7, "points": points.copy(), "bbox": [0, 0, 20, heights[t]]}]
        smoother(people, t / 10)
        smoothed.append(people[0]["points"])
    expected = reference_one_euro(track, 10.0, 0.5, 2.0, 8.0, heights)
    np.testing.assert_allclose(smoothed, expected, atol=1e-9)
    assert np.abs(expected - reference_one_euro(track, 10.0, 0.5, 2.0, 0.5, heights)).max() > 1


def test_a_track_is_smoothed_by_its_id_whatever_its_place_in_the_list(pose_run, tiny_coco):
    """Two still people, listed in another order every other frame (as a detector may list them): each track is
    filtered on its own, so a still person's smoothed keypoints are its unsmoothed ones. Filtered by place in the
    list, each frame's first person would be pulled ~3/4 of the way to the other person's keypoints."""
    image = cv2.imread(str(sorted((tiny_coco / "val2017").iterdir())[0]))[..., ::-1].copy()
    a, b = [10.0, 20.0, 80.0, 150.0, 1.0], [100.0, 30.0, 70.0, 180.0, 1.0]
    boxes = [np.array([a, b] if f % 2 == 0 else [b, a]) for f in range(4)]
    predictor = sapiens2_ft.load(pose_run[1]["export"])
    raw = list(predictor.stream([image] * 4, fps=10, boxes=boxes, batch_size=2))
    smooth = list(predictor.stream([image] * 4, fps=10, boxes=boxes, batch_size=2,
                                   smooth=SmoothOptions(min_cutoff=0.5, beta=0.0)))
    assert [[p["track_id"] for p in r.people] for r in smooth] == [[0, 1], [1, 0], [0, 1], [1, 0]]
    for unfiltered, filtered in zip(raw, smooth):
        for p, q in zip(unfiltered.people, filtered.people):
            # the same crop in another batch position: float rounding apart (a blend: tens of pixels)
            np.testing.assert_allclose(q["points"], p["points"], atol=1e-3)
