"""The prediction loop: images read ``batch_size`` at a time, every model run on the chunk (``infer_chunk``: one
``Result`` per image and model), each model's files written into its folder (its inference object's ``writer``), and
(with several models) one multi-task sheet per image. ``predict``, its videos, the web demo and the Python API run
models through ``infer_chunk``.

Where the people are comes from ``--mask_model``, else from the first ``--model`` whose task ``finds_people`` (seg,
matting); the tasks with ``people_only_pictures`` (normals, depth) draw them alone."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from tqdm import tqdm

from datamodules.boundary.writes import write_image
from sapiens2_ft.predict.boxes import BoxSource, PeopleBoxes, whole_image
from sapiens2_ft.predict.inputs import read_chunks
from sapiens2_ft.predict.result import People, Result
from sapiens2_ft.predict.sheet import sheet
from sapiens2_ft.tasks.inference import TaskInference, output_name

@dataclass
class Model:
    """One loaded model (its task's inference object), the folder its files go to (None: nothing written) and the
    images' known focal (px) where the model takes one."""

    inference: TaskInference
    task: str
    out: Path | None = None
    focal: float | None = None


def people_masks(models: list[Model], outputs: dict, mask_model: Model | None, images) -> list | None:
    """Per image, the people (H, W) bool from ``mask_model``, else from the first model that finds people (its
    ``outputs``); None without one."""
    if mask_model is not None:
        return [mask_model.inference.people(o)[0] for o in mask_model.inference.image_outputs(images)]
    for m in models:
        if m.task in outputs and m.inference.finds_people:
            return [m.inference.people(o)[0] for o in outputs[m.task]]
    return None


def person_boxes(models: list[Model], outputs: dict, source: BoxSource, keys: list[str], images) -> list[np.ndarray]:
    """The chunk's person boxes; boxes from a seg model that also runs as a ``--model`` reuse its outputs."""
    if isinstance(source, PeopleBoxes):
        for m in models:
            if m.inference is source.inference:
                return source.from_outputs(outputs[m.task])
    return source(keys, images)


def model_results(model: Model, names: list, images: list[np.ndarray], boxes: list[np.ndarray] | None,
                  outputs: list[dict] | None, masks: list | None, batch_size: int, maps: bool = False) -> list[Result]:
    """One model's ``Result`` of each image: a model that takes person boxes crops ``boxes`` (``estimate``), a
    whole-image one writes the files of its ``outputs`` (``files``; with ``maps``, its maps as float arrays too).
    ``masks``: per image the people (H, W) bool another model found, or None."""
    inference, masks = model.inference, masks or [None] * len(images)
    shown = [mask.numpy() if mask is not None else None for mask in masks]
    if inference.takes_person_boxes:
        found = inference.estimate(images, boxes, batch_size)
        keypoints = len(inference.labels)
        return [Result(name, image, inference, people, People(people, keypoints), mask=mask)
                for name, image, people, mask in zip(names, images, found, shown)]
    results = []
    for name, image, out, mask, mask_shown in zip(names, images, outputs, masks, shown):
        files = inference.files(out, 0, image, mask if inference.people_only_pictures else None)
        arrays = {k: v[0].float().cpu().numpy() for k, v in out.items()} if maps else {}
        results.append(Result(name, image, inference, files, maps=arrays, files=files, mask=mask_shown))
    return results


@torch.no_grad()
def infer_chunk(models: list[Model], keys: list, images: list[np.ndarray], source: BoxSource, batch_size: int,
                mask_model: Model | None = None, smooth_maps=None, maps: bool = False) -> list[dict[str, Result]]:
    """Per image, by task: each model's ``Result`` (``model_results``); the people's masks come from ``mask_model``,
    else from the first model that finds people. ``smooth_maps(task, outputs)``: a video's whole-image outputs (one
    dict per image, in order) blended over time before anything uses them; ``maps``: the results keep the maps."""
    whole = [m for m in models if not m.inference.takes_person_boxes]
    outputs = {m.task: m.inference.image_outputs(images, m.focal) for m in whole}
    if smooth_maps is not None:
        outputs = {task: smooth_maps(task, task_outputs) for task, task_outputs in outputs.items()}
    masks = people_masks(models, outputs, mask_model, images)
    boxes = person_boxes(models, outputs, source, keys, images) if len(whole) < len(models) else None
    results: list[dict[str, Result]] = [{} for _ in images]
    for m in models:
        for i, result in enumerate(model_results(m, keys, images, boxes, outputs.get(m.task), masks, batch_size,
                                                 maps)):
            results[i][m.task] = result
    return results


def predict_images(models: list[Model], images: dict[str, Path], batch_size: int, source: BoxSource = whole_image,
                   ids: dict[str, int] | None = None, mask_model: Model | None = None,
                   sheets: Path | None = None, workers: int = 2, max_pixels: int | None = None
                   ) -> tuple[dict[str, int], list[str]]:
    """Runs every model on every readable image and writes the results. Returns (per task: what its writer counted,
    people or images; the keys of the images skipped: unreadable, or above ``max_pixels``). ``workers`` threads
    decode the next images while the models run."""
    ids = ids or {key: i + 1 for i, key in enumerate(images)}
    writers = {m.task: m.inference.writer(m.out) for m in models}
    items, skipped = list(images.items()), []
    progress = tqdm(total=len(items), desc="predict", unit="image")
    for keys, originals, unreadable in read_chunks(items, batch_size, workers, max_pixels):
        skipped += unreadable
        progress.update(len(unreadable))
        if not keys:
            continue
        for key, image, results in zip(keys, originals, infer_chunk(models, keys, originals, source, batch_size,
                                                                    mask_model)):
            for task, writer in writers.items():
                writer.add(key, ids[key], image, results[task].output)
            if sheets is not None:
                write_image(sheets, f"{output_name(key)}.jpg", sheet(image, results)[..., ::-1])
        progress.update(len(keys))
    progress.close()
    return {task: writer.close() for task, writer in writers.items()}, skipped
