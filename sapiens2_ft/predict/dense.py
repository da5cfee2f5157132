"""Dense tasks: whole images resized as in validation (stretched for seg, letterboxed otherwise), the outputs
mapped back to the image's pixels and written as in validation."""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as F

from datamodules.dense.augment import validation_fit
from datamodules.dense.transforms import DenseTransform
from datamodules.transforms import affine
from sapiens2_ft.models.preprocessing import normalize_images


def unwarp(maps: torch.Tensor, matrix: np.ndarray, input_size, image_size, mode: str = "bilinear") -> torch.Tensor:
    """Maps (B, C, h, w) predicted for a warped input (``matrix``: image px -> input px) -> image pixels.

    Works at any map resolution: positions are normalised by the input size (pixel centres).
    """
    height, width = image_size
    ys, xs = torch.meshgrid(torch.arange(height, dtype=torch.float64), torch.arange(width, dtype=torch.float64),
                            indexing="ij")
    m = torch.as_tensor(matrix, dtype=torch.float64)
    px = m[0, 0] * xs + m[0, 1] * ys + m[0, 2]
    py = m[1, 0] * xs + m[1, 1] * ys + m[1, 2]
    grid = torch.stack([(px + 0.5) / input_size[1] * 2 - 1, (py + 0.5) / input_size[0] * 2 - 1], dim=-1)
    grid = grid[None].expand(len(maps), -1, -1, -1).to(maps.device, torch.float32)
    return F.grid_sample(maps.float(), grid, mode=mode, padding_mode="border", align_corners=False)


def uses_focal(module) -> bool:
    """Whether ``module``'s outputs can take a known camera (``with_focal``: pointmaps, made metric by it)."""
    return callable(getattr(module, "with_focal", None))


def dense_maps(module, originals: list[np.ndarray], focal: float | None = None) -> list[dict[str, torch.Tensor]]:
    """``module``'s outputs for whole images, each mapped back to its image's pixels (the validation resize of
    the task's training pipeline: stretched for seg, letterboxed otherwise). ``focal``: the images' fx in their
    own pixels (a calibrated camera), given to a module that ``uses_focal`` at the input's resolution."""
    if focal is not None and not uses_focal(module):
        raise ValueError(f"focal: only models with a metric scale (pointmap) take a known focal; this one is "
                         f"{module.task}")
    if focal is not None and not focal > 0:
        raise ValueError(f"focal: the focal length in pixels must be > 0, got {focal}")
    transform = DenseTransform(module.hparams.input_size, fit=validation_fit(None, module.task))
    size = tuple(module.hparams.input_size)
    matrices = [transform.matrix(im.shape[:2], None) for im in originals]
    crops = np.stack([affine.warp_image(im, m, size) for im, m in zip(originals, matrices)])
    outputs = module.infer(normalize_images(torch.from_numpy(crops).permute(0, 3, 1, 2).to(module.device)))
    if focal is not None:  # fx of the warped input: the first row of the warp times K (datamodules' intrinsics)
        outputs = module.with_focal(outputs, torch.tensor([m[0, 0] * focal for m in matrices], device=module.device))
    return [{name: value[i:i + 1] if value.ndim < 4 else unwarp(value[i:i + 1], matrix, size, image.shape[:2])
             for name, value in outputs.items()} for i, (image, matrix) in enumerate(zip(originals, matrices))]


def dense_files(module, image: np.ndarray, maps: dict, mask: torch.Tensor | None) -> dict:
    """One image's files (``module.prediction_files``: suffix -> array). ``mask`` (1, 1, H, W) keeps the pictures
    of normals and depth to the people."""
    batch = {"image": torch.from_numpy(image).permute(2, 0, 1)[None]}
    if mask is not None:
        batch["mask"] = mask
    return module.prediction_files(maps, batch, 0)
