"""The prediction loop: images read ``batch_size`` at a time, every model run on the chunk (``infer_chunk``), each
model's files written into its folder, and (with several models) one multi-task sheet per image.

Where the people are comes from ``--mask_model``, else from the first ``--model`` whose task finds people
(``TaskModule.people``: seg, matting); the tasks with ``people_only_pictures`` (normals, depth) draw them alone."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np
import torch
from tqdm import tqdm

from sapiens2_ft.predict.boxes import BoxSource, PeopleBoxes, whole_image
from sapiens2_ft.predict.dense import dense_files, dense_maps
from sapiens2_ft.predict.inputs import output_name, read_chunks
from sapiens2_ft.predict.pose import PoseResults, estimate
from sapiens2_ft.predict.sheet import sheet
from sapiens2_ft.tasks.base import finds_people, write_arrays
from sapiens2_ft.tasks.registry import task_spec


@dataclass
class Model:
    """One loaded model, the folder its files go to and the images' known focal (px) where the model takes one."""

    module: object
    task: str
    out: Path
    focal: float | None = None

    @property
    def is_pose(self) -> bool:
        return task_spec(self.task).predictor == "crops"


def people_masks(models: list[Model], maps: dict, mask_model: Model | None, images) -> list | None:
    """Per image, the people (H, W) bool from ``mask_model``, else from the first model that finds people (its
    ``maps``); None without one."""
    if mask_model is not None:
        return [mask_model.module.people(o)[0] for o in dense_maps(mask_model.module, images)]
    for m in models:
        if m.task in maps and finds_people(m.module):
            return [m.module.people(o)[0] for o in maps[m.task]]
    return None


def person_boxes(models: list[Model], maps: dict, source: BoxSource, keys: list[str], images) -> list[np.ndarray]:
    """The chunk's person boxes; boxes from a seg model that also runs as a ``--model`` reuse its outputs."""
    if isinstance(source, PeopleBoxes):
        for m in models:
            if m.module is source.module:
                return source.from_maps(maps[m.task])
    return source(keys, images)


@torch.no_grad()
def infer_chunk(models: list[Model], keys: list[str], images: list[np.ndarray], source: BoxSource,
                batch_size: int, mask_model: Model | None = None, smooth_maps=None) -> tuple[list[dict], list | None]:
    """Per image, per task: pose's people (``estimate``) or a dense task's files (``dense.files``); and per image
    the people (H, W) bool, None where no model finds them. ``smooth_maps(task, maps)``: a video's dense maps
    (one dict per image, in order) blended over time before anything uses them."""
    maps = {m.task: dense_maps(m.module, images, m.focal) for m in models if not m.is_pose}
    if smooth_maps is not None:
        maps = {task: smooth_maps(task, task_maps) for task, task_maps in maps.items()}
    masks = people_masks(models, maps, mask_model, images)
    results: list[dict] = [{} for _ in images]
    boxes = person_boxes(models, maps, source, keys, images) if any(m.is_pose for m in models) else None
    for m in models:
        if m.is_pose:
            for i, people in enumerate(estimate(m.module, images, boxes, batch_size)):
                results[i][m.task] = people
        else:
            for i, image in enumerate(images):
                mask = masks[i][None, None] if masks is not None and m.module.people_only_pictures else None
                results[i][m.task] = dense_files(m.module, image, maps[m.task][i], mask)
    return results, masks


def predict_images(models: list[Model], images: dict[str, Path], batch_size: int, source: BoxSource = whole_image,
                   ids: dict[str, int] | None = None, mask_model: Model | None = None,
                   sheets: Path | None = None, workers: int = 2, max_pixels: int | None = None
                   ) -> tuple[dict[str, int], list[str]]:
    """Runs every model on every readable image and writes the results. Returns (per task: people found for
    pose, images written for the dense tasks; the keys of the images skipped: unreadable, or above ``max_pixels``).
    ``workers`` threads decode the next images while the models run."""
    ids = ids or {key: i + 1 for i, key in enumerate(images)}
    pose = {m.task: PoseResults(m.out, m.module.metainfo) for m in models if m.is_pose}
    counts = {m.task: 0 for m in models}
    modules = {m.task: m.module for m in models}
    items, skipped = list(images.items()), []
    progress = tqdm(total=len(items), desc="predict", unit="image")
    for keys, originals, unreadable in read_chunks(items, batch_size, workers, max_pixels):
        skipped += unreadable
        progress.update(len(unreadable))
        if not keys:
            continue
        results, masks = infer_chunk(models, keys, originals, source, batch_size, mask_model)
        for i, (key, image, result) in enumerate(zip(keys, originals, results)):
            for m in models:
                if m.is_pose:
                    pose[m.task].add(key, ids[key], image, result[m.task])
                else:
                    write_arrays(m.out, output_name(key), result[m.task])
                    counts[m.task] += 1
            if sheets is not None:
                path = sheets / f"{output_name(key)}.jpg"
                path.parent.mkdir(parents=True, exist_ok=True)
                people = masks[i].numpy() if masks is not None else None
                cv2.imwrite(str(path), sheet(image, result, modules, people)[..., ::-1])
        progress.update(len(keys))
    progress.close()
    for task, writer in pose.items():
        counts[task] = writer.close()
    return counts, skipped
