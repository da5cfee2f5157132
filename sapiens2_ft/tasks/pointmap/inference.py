"""Pointmaps with a trained model: canonical camera XYZ and a focal scale from the model, metric XYZ at the image's
pixels (by the predicted focal, or a known camera's: ``with_focal``), their depth picture and depth range."""

from __future__ import annotations

from typing import NotRequired, Sequence, TypedDict

import numpy as np
import torch

from datamodules.boundary.writes import ply_bytes
from sapiens2_ft.tasks.dense_maps import resize_to
from sapiens2_ft.tasks.inference import Batch, Files, TaskInference
from sapiens2_ft.tasks.pointmap import draw
from sapiens2_ft.tasks.pointmap.spec import POINTMAP

MIN_SCALE = 1e-3


class PointmapBatch(Batch):
    pointmap: torch.Tensor  # (B, 3, H, W) canonical camera XYZ (focal ``canonical_focal``)
    mask: torch.Tensor  # (B, 1, H, W) bool: the pixels with a point
    scale: torch.Tensor  # (B, 1) canonical_focal / fx of the image
    intrinsics: torch.Tensor  # (B, 3, 3) K of the network input


class PointmapOutputs(TypedDict):
    pointmap: torch.Tensor  # (B, 3, H, W) canonical XYZ
    scale: NotRequired[torch.Tensor]  # (B,) canonical_focal / fx (a head with the scale branch, or a known focal)


def to_metric(canonical: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Canonical XYZ (B, 3, H, W) and scales (B,) or (B, 1) -> camera XYZ: all three divided by the scale
    (clamped at ``MIN_SCALE``, so a degenerate predicted scale cannot blow up the points)."""
    return canonical / scale.float().reshape(-1, 1, 1, 1).clamp_min(MIN_SCALE)


def depth_png(z: np.ndarray, mask: np.ndarray | None = None) -> np.ndarray:
    """The task's picture of depth (``draw.picture``) for ``cv2.imwrite`` (BGR)."""
    return np.ascontiguousarray(draw.picture(z, mask)[..., ::-1])


def point_cloud(xyz: np.ndarray, image: np.ndarray, mask: np.ndarray | None, K: np.ndarray) -> np.ndarray:
    """The bytes of a binary PLY of the pixels of ``xyz`` (H, W, 3 metric camera XYZ) within ``mask`` (None: all)
    whose point is finite with Z > 0, in row-major order, coloured by ``image`` (RGB), with the image's size and the
    intrinsics ``K`` (fx, fy, cx, cy) as header comments."""
    kept = np.isfinite(xyz).all(axis=-1) & (xyz[..., 2] > 0)
    if mask is not None:
        kept &= mask
    fx, fy, cx, cy = K[0, 0], K[1, 1], K[0, 2], K[1, 2]
    comments = ("sapiens2-ft pointmap: camera XYZ in metres, x right, y down, z forward (OpenCV)",
                f"image_size {xyz.shape[1]} {xyz.shape[0]}",
                f"intrinsics fx {fx:.6f} fy {fy:.6f} cx {cx:.6f} cy {cy:.6f}")
    return np.frombuffer(ply_bytes(xyz[kept], image[kept], comments), np.uint8)


class PointmapInference(TaskInference):
    """A pointmap model. ``canonical_focal``: the focal length of the canonical camera of its training targets."""

    spec = POINTMAP
    takes_focal = True
    people_only_pictures = True
    downloads = (".ply",)

    def __init__(self, input_size: Sequence[int] = (256, 192), canonical_focal: float = 768.0, model=None):
        super().__init__(input_size, model)
        self.canonical_focal = float(canonical_focal)

    def predict(self, pixel_values: torch.Tensor, size: Sequence[int] | None = None) -> PointmapOutputs:
        out = self.model(pixel_values)
        outputs = {"pointmap": resize_to(out.pointmaps, size)}
        if out.scales is not None:
            outputs["scale"] = out.scales.reshape(-1)
        return outputs

    def with_focal(self, outputs: PointmapOutputs, focal: torch.Tensor) -> PointmapOutputs:
        """``outputs`` with the scale of a known camera instead of the predicted one: ``focal`` (B,) fx in pixels of
        the network's input, ``scale = canonical_focal / fx`` (as the data's targets; ``predict --focal``)."""
        scale = self.canonical_focal / focal.to(outputs["pointmap"].device, torch.float32)
        return {**outputs, "scale": scale}

    def metric(self, outputs: PointmapOutputs) -> torch.Tensor:
        """Metric XYZ (B, 3, H, W) by the outputs' scale (a head without a scale branch: the canonical camera)."""
        scale = outputs.get("scale")
        if scale is None:
            scale = torch.ones(len(outputs["pointmap"]), device=outputs["pointmap"].device)
        return to_metric(outputs["pointmap"].float(), scale)

    def intrinsics(self, outputs: PointmapOutputs, i: int, shape: Sequence[int]) -> np.ndarray:
        """The 3x3 K of sample ``i`` in the pixels of an image of ``shape`` (H, W): the focal that made its points
        metric (a known camera's, or the one its predicted scale implies: ``canonical_focal / scale`` at the network
        input, back through the resize), the principal point at the image's centre (pixel centres at integers)."""
        scale = outputs.get("scale")
        scale = max(float(scale.reshape(-1)[i]), MIN_SCALE) if scale is not None else 1.0
        matrix = self.fit_matrix(shape)
        focal = self.canonical_focal / scale
        return np.array([[focal / float(matrix[0, 0]), 0.0, (shape[1] - 1) / 2],
                         [0.0, focal / float(matrix[1, 1]), (shape[0] - 1) / 2], [0.0, 0.0, 1.0]])

    def files(self, outputs: PointmapOutputs, i: int, image: np.ndarray, mask: torch.Tensor | None = None) -> Files:
        """``NAME.npy``: HxWx3 metric XYZ (float32); ``NAME_depth.png``: turbo colour map of 1 / Z (within ``mask``);
        ``NAME.ply``: the points (within ``mask``, finite, Z > 0) coloured by the image (``point_cloud``);
        ``NAME_intrinsics.txt``: their 3x3 K (``intrinsics``), as a dataset's ``intrinsics/NAME.txt``."""
        xyz = self.metric(outputs)[i].permute(1, 2, 0).cpu().numpy().astype(np.float32)
        shown = mask.reshape(xyz.shape[:2]).cpu().numpy().astype(bool) if mask is not None else None
        K = self.intrinsics(outputs, i, xyz.shape[:2])
        return {".npy": xyz, "_depth.png": depth_png(xyz[..., 2], shown), ".ply": point_cloud(xyz, image, shown, K),
                "_intrinsics.txt": K}

    def picture(self, result: Files, image: np.ndarray, people: np.ndarray | None) -> tuple[str, np.ndarray]:
        return draw.TITLE, draw.picture(result[".npy"][..., 2], people)

    def findings(self, result: Files) -> dict:
        """The depth (metric Z) of the image's pixels: minimum, median and maximum, in metres; the intrinsics (px)."""
        z = result[".npy"][..., 2]
        z = z[np.isfinite(z) & (z > 0)]
        found = {"depth_m": None if not z.size else {
            k: round(float(v), 4) for k, v in (("min", z.min()), ("median", np.median(z)), ("max", z.max()))}}
        if "_intrinsics.txt" in result:
            K = result["_intrinsics.txt"]
            found["intrinsics"] = {k: round(float(v), 4) for k, v in (("fx", K[0, 0]), ("fy", K[1, 1]),
                                                                      ("cx", K[0, 2]), ("cy", K[1, 2]))}
        return found
