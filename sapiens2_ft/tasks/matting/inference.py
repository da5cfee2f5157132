"""Image matting with a trained model: the alpha matte and the foreground colours at the image's pixels, the cut-out
over a checkerboard, where the people are."""

from __future__ import annotations

from typing import Sequence, TypedDict

import numpy as np
import torch

from sapiens2_ft.tasks.dense_maps import resize_to
from sapiens2_ft.tasks.inference import Batch, Files, TaskInference
from sapiens2_ft.tasks.matting import draw
from sapiens2_ft.tasks.matting.spec import MATTING
from sapiens2_ft.tasks.visualize import to_png


class MattingBatch(Batch):
    alpha: torch.Tensor  # (B, 1, H, W) float in [0, 1]
    foreground: torch.Tensor  # (B, 3, H, W) float in [0, 1]
    has_foreground: torch.Tensor  # (B,) bool: a foreground file was given


class MattingOutputs(TypedDict):
    alpha: torch.Tensor  # (B, 1, H, W) in [0, 1]
    foreground: torch.Tensor  # (B, 3, H, W) in [0, 1]


class MattingInference(TaskInference):
    """A matting model (alpha and foreground colours)."""

    spec = MATTING
    finds_people = True

    def predict(self, pixel_values: torch.Tensor, size: Sequence[int] | None = None) -> MattingOutputs:
        out = self.model(pixel_values)
        # Resizing after the sigmoid keeps values in [0, 1].
        return {"alpha": resize_to(out.alphas, size), "foreground": resize_to(out.foregrounds, size)}

    def files(self, outputs: MattingOutputs, i: int, image: np.ndarray, mask: torch.Tensor | None = None) -> Files:
        """``NAME_alpha.png``, ``NAME_foreground.png`` and ``NAME_composite.png`` (the foreground over a
        checkerboard)."""
        alpha = outputs["alpha"][i, 0].float().cpu()
        foreground = (outputs["foreground"][i].float().cpu().permute(1, 2, 0).numpy() * 255).clip(0, 255)
        composite = draw.picture(foreground, alpha.numpy())
        return {"_alpha.png": to_png(alpha), "_foreground.png": to_png(outputs["foreground"][i]),
                "_composite.png": np.ascontiguousarray(composite[..., ::-1])}

    def picture(self, result: Files, image: np.ndarray, people: np.ndarray | None) -> tuple[str, np.ndarray]:
        return draw.TITLE, draw.picture(image, result["_alpha.png"] / 255.0)

    def findings(self, result: Files) -> dict:
        """The fraction of the image that is foreground (alpha >= 0.5)."""
        return {"foreground_area": round(float((result["_alpha.png"] >= 128).mean()), 5)}

    def people(self, outputs: MattingOutputs) -> tuple[torch.Tensor, torch.Tensor]:
        """Alpha >= 0.5; probability the alpha."""
        alpha = outputs["alpha"][0, 0].float()
        return (alpha >= 0.5).cpu(), alpha.cpu()
