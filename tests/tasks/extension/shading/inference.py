"""Shading with a trained model: the light falling on each pixel (one grey channel in [0, 1]) at the image's
pixels, its file and picture.

The model class is ``Sapiens2ForNormalEstimation`` with one channel: its head is a plain per-pixel regressor whose
forward returns the raw maps as ``normals``; the sigmoid makes them the shading.
"""

from __future__ import annotations

from typing import Sequence, TypedDict

import numpy as np
import torch

from sapiens2_ft.tasks.shading import draw
from sapiens2_ft.tasks.shading.spec import SHADING
from sapiens2_ft.tasks.dense_maps import resize_to
from sapiens2_ft.tasks.inference import Batch, Files, TaskInference
from sapiens2_ft.tasks.visualize import to_png


class ShadingBatch(Batch):
    shading: torch.Tensor  # (B, 1, H, W) float in [0, 1]
    mask: torch.Tensor  # (B, H, W) bool: the pixels whose shading is known


class ShadingOutputs(TypedDict):
    shading: torch.Tensor  # (B, 1, H, W) in [0, 1]


class ShadingInference(TaskInference):
    """An shading model (one fixed output)."""

    spec = SHADING

    def predict(self, pixel_values: torch.Tensor, size: Sequence[int] | None = None) -> ShadingOutputs:
        return {"shading": resize_to(torch.sigmoid(self.model(pixel_values).normals), size)}

    def files(self, outputs: ShadingOutputs, i: int, image: np.ndarray, mask: torch.Tensor | None = None) -> Files:
        """``NAME.npy``: HxW float16 shading; ``NAME_shading.png``: its grey picture."""
        shading = outputs["shading"][i, 0].float().cpu()
        return {".npy": shading.numpy().astype("float16"), "_shading.png": to_png(shading)}

    def picture(self, result: Files, image: np.ndarray, people: np.ndarray | None) -> tuple[str, np.ndarray]:
        return draw.TITLE, draw.picture(result[".npy"].astype(np.float32))

    def findings(self, result: Files) -> dict:
        """The mean shading of the image."""
        return {"mean_shading": round(float(result[".npy"].astype(np.float32).mean()), 4)}
