"""The point cloud of a pointmap prediction (``NAME.ply``): its points are the metric pointmap at the kept pixels
(within the people's mask, finite, Z > 0) in metres and in the camera's axis order, coloured by the image in RGB, with
the intrinsics that made them metric in its header; read back by an independent reader (``tests/ply_reader.py``)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from ply_reader import intrinsics, read_ply

from datamodules.boundary.writes import ply_bytes
from datamodules.dense.geometry import back_project
from sapiens2_ft.tasks.inference import write_arrays
from sapiens2_ft.tasks.pointmap.inference import PointmapInference
from sapiens2_ft.tasks.pointmap.targets import load_intrinsics

INPUT = (128, 96)
SHAPE = (64, 40)  # letterboxed into INPUT by 2: the focal at the network input is twice the image's
FX, FY = 300.0, 300.0  # the camera's focal in the image's pixels


def scene(seed: int = 0):
    """(metric XYZ (H, W, 3), RGB image, people mask) with a NaN and a point behind the camera among the people."""
    rng = np.random.default_rng(seed)
    depth = rng.uniform(1.0, 4.0, SHAPE)
    K = np.array([[FX, 0, 17.0], [0, FY, 29.0], [0, 0, 1]])  # off-centre: the points, not K, are written
    xyz = back_project(depth, K)
    xyz[3, 4] = np.nan
    xyz[5, 6, 2] = -1.0
    image = rng.integers(0, 256, (*SHAPE, 3), dtype=np.uint8)
    mask = np.zeros(SHAPE, bool)
    mask[:, : SHAPE[1] // 2] = True
    return xyz.astype(np.float32), image, mask


def written(tmp_path, xyz, image, mask):
    """The ``files`` of one prediction whose metric points are ``xyz`` (scale: the camera's FX), written and read."""
    inference = PointmapInference(input_size=INPUT)
    scale = inference.canonical_focal / (FX * 2)  # canonical_focal / fx at the network input
    outputs = {"pointmap": torch.from_numpy(xyz * scale).permute(2, 0, 1)[None], "scale": torch.tensor([scale])}
    files = inference.files(outputs, 0, image, None if mask is None else torch.from_numpy(mask))
    write_arrays(tmp_path, "sub/a", files)
    return files, read_ply(tmp_path / "sub" / "a.ply")


def test_the_ply_holds_the_metric_points_of_the_people_in_rgb(tmp_path):
    xyz, image, mask = scene()
    files, (points, colours, comments) = written(tmp_path, xyz, image, mask)
    kept = mask & np.isfinite(xyz).all(-1) & (xyz[..., 2] > 0)
    assert kept.sum() == mask.sum() - 2 == len(points)  # the background, the NaN and the point behind left out
    assert np.abs(points - files[".npy"][kept]).max() < 1e-3  # within 1 mm of the .npy, axis for axis
    assert np.abs(points - xyz[kept]).max() < 1e-3 and 1.0 <= points[:, 2].min()  # metres, not millimetres
    assert np.array_equal(colours, image[kept])  # RGB as the image, in the pixels' row-major order
    assert comments[0].startswith("sapiens2-ft pointmap: camera XYZ in metres")
    assert f"image_size {SHAPE[1]} {SHAPE[0]}" in comments


def test_the_header_the_txt_and_the_json_give_the_focal_that_made_the_points_metric(tmp_path):
    xyz, image, _ = scene(1)
    files, (points, _, comments) = written(tmp_path, xyz, image, None)
    assert len(points) == SHAPE[0] * SHAPE[1] - 2  # no mask: every finite point in front of the camera
    K = intrinsics(comments)
    assert K["fx"] == pytest.approx(FX, rel=1e-6) and K["fy"] == pytest.approx(FY, rel=1e-6)
    assert (K["cx"], K["cy"]) == ((SHAPE[1] - 1) / 2, (SHAPE[0] - 1) / 2)  # the image's centre
    as_data = load_intrinsics(tmp_path / "sub" / "a_intrinsics.txt")  # a dataset's intrinsics/NAME.txt reader
    assert np.allclose(as_data, [[K["fx"], 0, K["cx"]], [0, K["fy"], K["cy"]], [0, 0, 1]], rtol=1e-6)
    found = PointmapInference(input_size=INPUT).findings(files)["intrinsics"]
    assert found == {name: round(value, 4) for name, value in K.items()}


def test_a_point_cloud_is_refused_malformed():
    points, colours = np.zeros((4, 3), np.float32), np.zeros((4, 3), np.uint8)
    assert ply_bytes(points, colours).endswith(b"end_header\n" + bytes(15 * 4))
    with pytest.raises(ValueError, match="single lines of ASCII"):
        ply_bytes(points, colours, ("a\nelement vertex 9",))  # a comment cannot forge a header line
    with pytest.raises(ValueError, match="uint8 colours"):
        ply_bytes(points, colours.astype(np.float32))
