"""Albedo with a trained model: the RGB surface colour before lighting at the image's pixels, and its picture."""

from __future__ import annotations

from typing import Sequence, TypedDict

import numpy as np
import torch

from sapiens2_ft.tasks.albedo import draw
from sapiens2_ft.tasks.albedo.spec import ALBEDO
from sapiens2_ft.tasks.dense_maps import resize_to
from sapiens2_ft.tasks.inference import Batch, Files, TaskInference
from sapiens2_ft.tasks.visualize import to_png


class AlbedoBatch(Batch):
    albedo: torch.Tensor  # (B, 3, H, W) float RGB albedo in [0, 1]
    mask: torch.Tensor  # (B, 1, H, W) bool: the pixels with an albedo


class AlbedoOutputs(TypedDict):
    albedo: torch.Tensor  # (B, 3, H, W) raw RGB predictions (not clamped)


class AlbedoInference(TaskInference):
    """An albedo model (a three-output ``Sapiens2ForNormalEstimation``: its ``normals`` are the raw RGB)."""

    spec = ALBEDO
    people_only_pictures = True  # an albedo is a person's: predict's pictures show the people a mask model finds

    def predict(self, pixel_values: torch.Tensor, size: Sequence[int] | None = None) -> AlbedoOutputs:
        return {"albedo": resize_to(self.model(pixel_values).normals, size)}

    def files(self, outputs: AlbedoOutputs, i: int, image: np.ndarray, mask: torch.Tensor | None = None) -> Files:
        """``NAME.npy``: HxWx3 float16 RGB clamped to [0, 1]; ``NAME_albedo.png``: that picture, black off ``mask``."""
        albedo = outputs["albedo"][i].float().clamp(0.0, 1.0).cpu()
        picture = to_png(albedo)
        if mask is not None:  # the people only (ground truth in validation, --mask_model in predict)
            picture[~mask.reshape(picture.shape[:2]).cpu().numpy().astype(bool)] = 0
        return {".npy": albedo.permute(1, 2, 0).numpy().astype("float16"), "_albedo.png": picture}

    def picture(self, result: Files, image: np.ndarray, people: np.ndarray | None) -> tuple[str, np.ndarray]:
        return draw.TITLE, draw.picture(result[".npy"].astype(np.float32), people)
