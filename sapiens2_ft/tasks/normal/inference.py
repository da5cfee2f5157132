"""Surface normals with a trained model: camera-space unit normals at the image's pixels (x right, y down, z forward)
and their picture."""

from __future__ import annotations

from typing import Sequence, TypedDict

import numpy as np
import torch

from sapiens2_ft.tasks.dense_maps import resize_to, unit_vectors
from sapiens2_ft.tasks.inference import Batch, Files, TaskInference
from sapiens2_ft.tasks.normal import draw
from sapiens2_ft.tasks.normal.spec import NORMAL
from sapiens2_ft.tasks.visualize import to_png


class NormalBatch(Batch):
    normals: torch.Tensor  # (B, 3, H, W) float unit normals
    mask: torch.Tensor  # (B, 1, H, W) bool: the pixels with a normal


class NormalOutputs(TypedDict):
    normals: torch.Tensor  # (B, 3, H, W) raw (not unit) predictions


class NormalInference(TaskInference):
    """A normal model (three fixed outputs)."""

    spec = NORMAL
    people_only_pictures = True

    def predict(self, pixel_values: torch.Tensor, size: Sequence[int] | None = None) -> NormalOutputs:
        return {"normals": resize_to(self.model(pixel_values).normals, size)}

    def files(self, outputs: NormalOutputs, i: int, image: np.ndarray, mask: torch.Tensor | None = None) -> Files:
        """``NAME.npy``: HxWx3 float16 unit normals; ``NAME_normal.png``: (n + 1) / 2 as RGB, black off ``mask``."""
        unit = unit_vectors(outputs["normals"][i].float(), dim=0)
        picture = to_png(unit, -1.0, 1.0)
        if mask is not None:  # the figure only (ground truth in validation, the people in predict)
            picture[~mask.reshape(picture.shape[:2]).cpu().numpy().astype(bool)] = 0
        return {".npy": unit.permute(1, 2, 0).cpu().numpy().astype("float16"), "_normal.png": picture}

    def picture(self, result: Files, image: np.ndarray, people: np.ndarray | None) -> tuple[str, np.ndarray]:
        return draw.TITLE, draw.picture(result[".npy"].astype(np.float32), people)
