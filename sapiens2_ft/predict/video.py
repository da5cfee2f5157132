"""Video in and out: frames from a video file (OpenCV's FFmpeg) or a folder of frames, run ``batch_size`` at a
time, written as ``OUT/NAME.mp4`` (the frame rate kept) with the pictures of every model, and ``OUT/NAME.json`` with
per-frame people and their track ids (an IoU tracker over the person boxes); with ``smooth``, each track's keypoints
One-Euro-filtered and the dense maps blended over time (``smoothing``)."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import cv2
import numpy as np
import torch
from tqdm import tqdm

from datamodules.boundary.video import NotAVideo, open_video
from datamodules.boundary.writes import replacing, write_json
from datamodules.errors import BadInput, DataError, NotFound
from sapiens2_ft.predict.boxes import BoxSource, whole_image
from sapiens2_ft.predict.inputs import IMAGE_SUFFIXES, background, read_or_warn
from sapiens2_ft.predict.run import Model, infer_chunk
from sapiens2_ft.predict.sheet import sheet
from sapiens2_ft.predict.smoothing import KeypointSmoother, MapBlend, SmoothOptions
from sapiens2_ft.tasks.pose.results import keypoint_triplets

VIDEO_SUFFIXES = {".mp4", ".avi", ".mov", ".mkv", ".webm", ".m4v", ".mpg", ".mpeg"}


def is_video(path: Path) -> bool:
    return path.is_file() and path.suffix.lower() in VIDEO_SUFFIXES


class Frames:
    """The RGB frames of a video file or of a folder of images (in name order), with the frame rate."""

    def __init__(self, path: Path, fps: float | None = None):
        self.path, self.folder = path, path.is_dir()
        if self.folder:
            self.files = sorted(p for p in path.iterdir() if p.suffix.lower() in IMAGE_SUFFIXES)
            if not self.files:
                raise NotFound(f"--input {path}: no frames ({', '.join(sorted(IMAGE_SUFFIXES))}) in the folder")
            self.fps, self.count = float(fps or 30.0), len(self.files)
            return
        try:
            capture = open_video(path)
        except NotAVideo:
            capture = None
        except DataError as err:
            raise err.with_message(f"--input {err}") from None
        ok = capture is not None and capture.read()[0]
        if capture is not None:
            capture.release()
        if not ok:
            raise BadInput(f"--input {path}: cannot be read as a video (missing, not a video, or a codec this "
                           f"OpenCV build cannot decode); convert it, e.g. `ffmpeg -i {path.name} -c:v libx264 "
                           f"out.mp4`, or extract its frames into a folder and pass that with --video")
        capture = open_video(path)
        self.fps = float(fps or capture.get(cv2.CAP_PROP_FPS) or 30.0)
        self.count = int(capture.get(cv2.CAP_PROP_FRAME_COUNT)) or None
        capture.release()

    def __iter__(self) -> Iterator[np.ndarray]:
        if self.folder:
            for file in self.files:
                frame = read_or_warn(file)
                if frame is not None:
                    yield frame
            return
        capture = open_video(self.path)
        try:
            while True:
                ok, frame = capture.read()
                if not ok:
                    return
                yield np.ascontiguousarray(frame[..., ::-1])
        finally:
            capture.release()


def chunks(frames, size: int) -> Iterator[list[np.ndarray]]:
    chunk = []
    for frame in frames:
        chunk.append(frame)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def iou_matrix(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """IoU of (N, 4) and (M, 4) xywh boxes."""
    a0, a1 = a[:, None, :2], a[:, None, :2] + a[:, None, 2:4]
    b0, b1 = b[None, :, :2], b[None, :, :2] + b[None, :, 2:4]
    inter = np.clip(np.minimum(a1, b1) - np.maximum(a0, b0), 0, None).prod(-1)
    union = a[:, None, 2:4].prod(-1) + b[None, :, 2:4].prod(-1) - inter
    return inter / np.maximum(union, 1e-9)


class IoUTracker:
    """Track ids for each frame's person boxes: a box continues the track whose last box it overlaps most
    (IoU >= ``min_iou``, greedy by IoU); a track unseen for ``max_age`` frames ends; other boxes start tracks."""

    def __init__(self, min_iou: float = 0.3, max_age: int = 30):
        self.min_iou, self.max_age = min_iou, max_age
        self.tracks: dict[int, tuple[np.ndarray, int]] = {}  # id -> (last box xywh, frame last seen)
        self.next_id, self.frame = 0, -1

    def update(self, boxes: np.ndarray) -> list[int]:
        self.frame += 1
        self.tracks = {t: v for t, v in self.tracks.items() if self.frame - v[1] <= self.max_age}
        ids = [-1] * len(boxes)
        track_ids = list(self.tracks)
        if len(boxes) and track_ids:
            overlaps = iou_matrix(np.asarray(boxes)[:, :4], np.stack([self.tracks[t][0] for t in track_ids]))
            for flat in np.argsort(-overlaps, axis=None):
                i, j = divmod(int(flat), len(track_ids))
                if overlaps[i, j] < self.min_iou:
                    break
                if ids[i] == -1 and track_ids[j] not in ids:
                    ids[i] = track_ids[j]
        for i, box in enumerate(boxes):
            if ids[i] == -1:
                ids[i], self.next_id = self.next_id, self.next_id + 1
            self.tracks[ids[i]] = (np.asarray(box[:4], dtype=np.float64), self.frame)
        return ids


class VideoPeople:
    """Each frame's people in turn: their track ids (``IoUTracker``) and, when ``smooth`` says so, their keypoints
    One-Euro-filtered per track (``KeypointSmoother``), at the frame's time (index / ``fps``)."""

    def __init__(self, fps: float, smooth: SmoothOptions | None = None):
        self.fps, self.tracker, self.frame = fps, IoUTracker(), -1
        self.smoother = KeypointSmoother(smooth) if smooth is not None and smooth.keypoints else None

    def __call__(self, people: list[dict]) -> list[dict]:
        """``people`` (``points``, ``bbox`` ...) of the next frame, given ``track_id`` and filtered in place."""
        self.frame += 1
        for person, track_id in zip(people, self.tracker.update(np.array([p["bbox"] for p in people]))):
            person["track_id"] = track_id
        if self.smoother is not None:
            self.smoother(people, self.frame / self.fps)
        return people


def map_blends(models: list[Model], smooth: SmoothOptions | None):
    """``infer_chunk``'s ``smooth_maps``: each dense model's maps blended over the frames (None: not blended)."""
    if smooth is None or smooth.map_weight >= 1:
        return None
    blends = {m.task: MapBlend(smooth.map_weight) for m in models if not m.inference.takes_person_boxes}
    return lambda task, maps: [blends[task](m) for m in maps]


def person_record(person: dict) -> dict:
    return {"track_id": person["track_id"], "bbox": np.asarray(person["bbox"], dtype=np.float64).round(2).tolist(),
            "score": round(person["score"], 4), "keypoints": keypoint_triplets(person["points"], person["scores"])}


@torch.no_grad()
def predict_video(models: list[Model], frames: Frames, out: Path, batch_size: int,
                  source: BoxSource = whole_image, mask_model: Model | None = None,
                  smooth: SmoothOptions | None = None) -> tuple[Path, Path]:
    """Writes ``OUT/NAME.mp4`` (one sheet per frame) and ``OUT/NAME.json``; returns their paths."""
    name = frames.path.stem if not frames.folder else frames.path.name
    video_file, json_file = out / f"{name}.mp4", out / f"{name}.json"
    trackers = {m.task: VideoPeople(frames.fps, smooth) for m in models if m.inference.takes_person_boxes}
    smooth_maps = map_blends(models, smooth)
    records, index = [], 0
    progress = tqdm(total=frames.count, desc="predict", unit="frame")
    with replacing(out, video_file.name) as temporary:  # the video shows once whole, never through a link
        writer = None
        try:
            for chunk in background(chunks(frames, batch_size)):  # the next frames decode while these run
                keys = [f"frame{index + k:06d}" for k in range(len(chunk))]
                results = infer_chunk(models, keys, chunk, source, batch_size, mask_model, smooth_maps)
                for frame, result in zip(chunk, results):
                    record = {"frame": index, "time": round(index / frames.fps, 4)}
                    for task, people in trackers.items():
                        record["people"] = [person_record(p) for p in people(result[task].output)]
                    picture = sheet(frame, result, legend=False)[..., ::-1]
                    if writer is None:
                        writer = cv2.VideoWriter(str(temporary), cv2.VideoWriter_fourcc(*"mp4v"), frames.fps,
                                                 (picture.shape[1], picture.shape[0]))
                        if not writer.isOpened():
                            raise NotFound(f"--out: cannot write {video_file} (OpenCV has no mp4v encoder here)")
                    writer.write(np.ascontiguousarray(picture))
                    records.append(record)
                    index += 1
                progress.update(len(chunk))
        finally:
            progress.close()
            if writer is not None:
                writer.release()
        if not records:
            raise BadInput(f"--input {frames.path}: no frame could be read")
    write_json(out, json_file.name, {"video": frames.path.name, "fps": frames.fps, "frames": records,
                                     "tasks": [m.task for m in models],
                                     "smooth": None if smooth is None else vars(smooth)})
    return video_file, json_file
