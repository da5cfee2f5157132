"""The prediction loop: images read ``batch_size`` at a time, every model run on the chunk, each model's files
written into its folder, and (with several models) one multi-task sheet per image."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cv2
import torch
from tqdm import tqdm

from sapiens2_ft.predict.boxes import BoxSource, whole_image
from sapiens2_ft.predict.dense import dense_maps, figure_mask, write_dense
from sapiens2_ft.predict.inputs import output_name, read_chunk
from sapiens2_ft.predict.pose import PoseResults, estimate
from sapiens2_ft.predict.sheet import sheet
from sapiens2_ft.tasks.registry import task_spec

MASKED_TASKS = ("normal", "pointmap")  # their pictures show the people only when a seg or matting result exists


@dataclass
class Model:
    """One loaded model and the folder its files go to."""

    module: object
    task: str
    out: Path

    @property
    def is_pose(self) -> bool:
        return task_spec(self.task).predictor == "pose"


def people_masks(models: list[Model], maps: dict, mask_model: Model | None, images) -> list | None:
    """Per image, the people (1, 1, H, W) from ``mask_model``, else from a seg (or matting) model among
    ``models``; None without either."""
    if mask_model is not None:
        return [figure_mask(mask_model.task, o) for o in dense_maps(mask_model.module, images)]
    for task in ("seg", "matting"):
        if task in maps:
            return [figure_mask(task, o) for o in maps[task]]
    return None


@torch.no_grad()
def predict_images(models: list[Model], images: dict[str, Path], batch_size: int, source: BoxSource = whole_image,
                   ids: dict[str, int] | None = None, mask_model: Model | None = None,
                   sheets: Path | None = None) -> tuple[dict[str, int], int]:
    """Runs every model on every readable image. Returns (per task: people found for pose, images written for
    the dense tasks; unreadable images skipped)."""
    ids = ids or {key: i + 1 for i, key in enumerate(images)}
    pose = {m.task: PoseResults(m.out, m.module.metainfo) for m in models if m.is_pose}
    counts = {m.task: 0 for m in models}
    items, skipped = list(images.items()), 0
    progress = tqdm(total=len(items), desc="predict", unit="image")
    for start in range(0, len(items), batch_size):
        keys, originals, unreadable = read_chunk(items[start:start + batch_size])
        skipped += unreadable
        progress.update(unreadable)
        if not keys:
            continue
        maps = {m.task: dense_maps(m.module, originals) for m in models if not m.is_pose}
        masks = people_masks(models, maps, mask_model, originals)
        results: list[dict] = [{} for _ in keys]
        for m in models:
            if m.is_pose:
                people = estimate(m.module, originals, source(keys, originals), batch_size)
                for i, key in enumerate(keys):
                    pose[m.task].add(key, ids[key], originals[i], people[i])
                    results[i][m.task] = people[i]
                continue
            for i, key in enumerate(keys):
                mask = masks[i] if masks is not None and m.task in MASKED_TASKS else None
                results[i][m.task] = write_dense(m.module, m.out, key, originals[i], maps[m.task][i], mask)
                counts[m.task] += 1
        if sheets is not None:
            modules = {m.task: m.module for m in models}
            for key, image, result in zip(keys, originals, results):
                path = sheets / f"{output_name(key)}.jpg"
                path.parent.mkdir(parents=True, exist_ok=True)
                cv2.imwrite(str(path), sheet(image, result, modules)[..., ::-1])
        progress.update(len(keys))
    progress.close()
    for task, writer in pose.items():
        counts[task] = writer.close()
    return counts, skipped
