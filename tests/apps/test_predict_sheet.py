"""Several models in one predict run: each task's files in OUT/TASK, normals, depth and the point cloud masked by the
seg model's people, and one sheet per image."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from ply_reader import intrinsics, read_ply

from sapiens2_ft import predict
from sapiens2_ft.tasks.normal.module import NormalModule
from sapiens2_ft.tasks.pointmap.module import PointmapModule
from sapiens2_ft.tasks.visualize import MIN_PANEL_HEIGHT, inverse_depth_turbo

FOCAL = 411.5  # --focal: the point cloud's header gives it


@pytest.fixture(scope="module")
def dense_models(tmp_path_factory):
    out = tmp_path_factory.mktemp("dense_models")
    for name, cls in (("normal", NormalModule), ("pointmap", PointmapModule)):
        module = cls(size="tiny", input_size=(128, 96))
        module.configure_model()
        module.model.save_pretrained(out / name)
    return out


def test_several_models_write_per_task_folders_and_a_sheet(pose_run, seg_checkpoint, dense_models, dense_root,
                                                           tmp_path):
    images = dense_root / "val" / "images"
    names = sorted(p.stem for p in images.iterdir())
    outside = tmp_path / "not_yours.ply"
    outside.write_text("a file a link at an output's name points to\n")
    (tmp_path / "out" / "pointmap").mkdir(parents=True)
    (tmp_path / "out" / "pointmap" / f"{names[0]}.ply").symlink_to(outside)
    out = predict.main(["--model", str(pose_run[0] / "export"), "--model", str(seg_checkpoint),
                        "--model", str(dense_models / "normal"), "--model", str(dense_models / "pointmap"),
                        "--input", str(images), "--out", str(tmp_path / "out"), "--whole_image", "--focal", str(FOCAL)])
    assert len(json.loads((out / "pose" / "keypoints.json").read_text())) == len(names)  # whole-image boxes
    assert outside.read_text() == "a file a link at an output's name points to\n"  # replaced, not written through
    assert not (out / "pointmap" / f"{names[0]}.ply").is_symlink()
    for name in names:
        people = cv2.imread(str(out / "seg" / f"{name}.png"), cv2.IMREAD_UNCHANGED) > 0
        assert 0 < people.mean() < 1, "the random seg model should see some people and some background"
        check_point_cloud(out / "pointmap", name, cv2.imread(str(images / f"{name}.png"))[..., ::-1], people)
        for picture in (out / "normal" / f"{name}_normal.png", out / "pointmap" / f"{name}_depth.png"):
            pixels = cv2.imread(str(picture))
            assert (pixels[~people] == 0).all(), picture  # the background removed by the seg result
        sheet = cv2.imread(str(out / "sheets" / f"{name}.jpg"))
        height, width = people.shape
        factor = -(-MIN_PANEL_HEIGHT // height)
        assert sheet.shape[1] == 5 * width * factor  # image, pose, seg, normals, inverse depth
        assert sheet.shape[0] > height * factor  # captions and the class legend


def check_point_cloud(folder, name: str, image: np.ndarray, people: np.ndarray) -> None:
    """``NAME.ply``: the points of ``NAME.npy`` at the people's pixels (finite, Z > 0) within 1 mm, the image's RGB,
    the ``--focal`` given and the image's centre in its header."""
    xyz = np.load(folder / f"{name}.npy")
    points, colours, comments = read_ply(folder / f"{name}.ply")
    kept = people & np.isfinite(xyz).all(-1) & (xyz[..., 2] > 0)
    assert 0 < len(points) == kept.sum() < people.size  # the background left out
    assert np.abs(points - xyz[kept]).max() < 1e-3
    assert np.array_equal(colours, image[kept])
    K = intrinsics(comments)
    assert K["fx"] == pytest.approx(FOCAL, rel=1e-5) and K["fy"] == pytest.approx(FOCAL, rel=1e-5)
    assert (K["cx"], K["cy"]) == ((image.shape[1] - 1) / 2, (image.shape[0] - 1) / 2)


def test_one_model_per_task(seg_checkpoint, dense_root, tmp_path):
    with pytest.raises(SystemExit, match="two seg models"):
        predict.main(["--model", str(seg_checkpoint), "--model", str(seg_checkpoint),
                      "--input", str(dense_root / "val" / "images"), "--out", str(tmp_path / "out")])


def test_inverse_depth_is_red_near_and_black_off_the_people():
    depth = np.tile(np.linspace(1.0, 5.0, 50)[None], (10, 1))  # nearest on the left
    mask = np.ones_like(depth, bool)
    mask[:, -5:] = False
    rgb = inverse_depth_turbo(depth, mask)
    assert rgb[0, 0, 0] > rgb[0, 0, 2] and rgb[0, 40, 2] > rgb[0, 40, 0]  # near red, far blue
    assert (rgb[:, -5:] == 0).all()
    assert (inverse_depth_turbo(-depth)[..., :] == 0).all()  # no positive depth: nothing to show
