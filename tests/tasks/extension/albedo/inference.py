"""Albedo with a trained model: one grey reflectance channel in [0, 1] at the image's pixels, its file and picture.

The model class is ``Sapiens2ForNormalEstimation`` with one channel: its head is a plain per-pixel regressor whose
forward returns the raw maps as ``normals``; the sigmoid makes them albedo.
"""

from __future__ import annotations

from typing import Sequence, TypedDict

import numpy as np
import torch

from sapiens2_ft.tasks.albedo import draw
from sapiens2_ft.tasks.dense_maps import resize_to
from sapiens2_ft.tasks.inference import Batch, Files, TaskInference
from sapiens2_ft.tasks.visualize import to_png


class AlbedoBatch(Batch):
    albedo: torch.Tensor  # (B, 1, H, W) float in [0, 1]
    mask: torch.Tensor  # (B, H, W) bool: the pixels whose albedo is known


class AlbedoOutputs(TypedDict):
    albedo: torch.Tensor  # (B, 1, H, W) in [0, 1]


class AlbedoInference(TaskInference):
    """An albedo model (one fixed output)."""

    task = "albedo"

    def predict(self, pixel_values: torch.Tensor, size: Sequence[int] | None = None) -> AlbedoOutputs:
        return {"albedo": resize_to(torch.sigmoid(self.model(pixel_values).normals), size)}

    def files(self, outputs: AlbedoOutputs, i: int, image: np.ndarray, mask: torch.Tensor | None = None) -> Files:
        """``NAME.npy``: HxW float16 albedo; ``NAME_albedo.png``: its grey picture."""
        albedo = outputs["albedo"][i, 0].float().cpu()
        return {".npy": albedo.numpy().astype("float16"), "_albedo.png": to_png(albedo)}

    def picture(self, result: Files, image: np.ndarray, people: np.ndarray | None) -> tuple[str, np.ndarray]:
        return draw.TITLE, draw.picture(result[".npy"].astype(np.float32))

    def findings(self, result: Files) -> dict:
        """The mean albedo of the image."""
        return {"mean_albedo": round(float(result[".npy"].astype(np.float32).mean()), 4)}
