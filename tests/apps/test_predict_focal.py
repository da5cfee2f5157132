"""``predict --focal`` / ``Predictor.predict(focal=...)``: a pointmap made metric by the camera's known focal. The
scale it gives equals the one the datamodule derives from the same image's K (an independent path: the warp's
intrinsics update), and the written points are the plain prediction rescaled by predicted over known scale."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

from sapiens2_ft import api, predict
from sapiens2_ft.tasks.dense_data import DenseTaskData
from sapiens2_ft.tasks.normal.module import NormalModule
from sapiens2_ft.tasks.pointmap.module import PointmapModule

SIZE = (128, 96)  # half the synthetic images' 256x192: the letterbox scales K by 0.5


@pytest.fixture(scope="module")
def pointmap_module():
    torch.manual_seed(0)
    module = PointmapModule(size="tiny", input_size=SIZE)
    module.configure_model()
    return module.eval()


def val_images(root):
    """(name, RGB image, K) of the val split."""
    out = []
    for path in sorted((root / "val" / "images").iterdir()):
        K = np.loadtxt(root / "val" / "intrinsics" / f"{path.stem}.txt")
        out.append((path.stem, cv2.imread(str(path))[..., ::-1].copy(), K))
    return out


def test_known_focal_gives_the_datamodules_scale(pointmap_module, dense_root):
    dm = DenseTaskData("pointmap", root=str(dense_root), input_size=SIZE, batch_size=8, num_workers=0)
    dm.setup("fit")
    batch = next(iter(dm.val_dataloader()))
    for name, image, K in val_images(dense_root):
        expected = batch["scale"].reshape(-1)[batch["name"].index(name)]
        with torch.no_grad():
            maps = pointmap_module.inference.image_outputs([image], focal=float(K[0, 0]))[0]
            plain = pointmap_module.inference.image_outputs([image])[0]
        assert maps["scale"].item() == pytest.approx(expected.item(), rel=1e-5)
        assert torch.equal(maps["pointmap"], plain["pointmap"])  # the canonical points are the model's
        assert not torch.allclose(maps["scale"], plain["scale"])  # an untrained scale branch guesses otherwise


def test_predict_focal_rescales_the_metric_points(pointmap_module, dense_root, tmp_path):
    model = tmp_path / "pointmap"
    pointmap_module.model.save_pretrained(model)
    name, image, K = val_images(dense_root)[0]
    images = dense_root / "val" / "images"
    plain = predict.main(["--model", str(model), "--input", str(images), "--out", str(tmp_path / "plain")])
    known = predict.main(["--model", str(model), "--input", str(images), "--out", str(tmp_path / "known"),
                          "--focal", str(K[0, 0])])
    ratio = np.load(known / f"{name}.npy") / np.load(plain / f"{name}.npy")
    predictor = api.load(model)
    height = predictor.inference.input_size[0]  # the letterbox fits the height: fx * height / image height
    known_scale = predictor.inference.canonical_focal / (float(K[0, 0]) * height / image.shape[0])
    expected = float(predictor.predict(image)[0].maps["scale"]) / known_scale
    assert np.allclose(ratio, expected, rtol=1e-4)  # predicted over known scale, on every point
    via_api = predictor.predict(image, focal=float(K[0, 0]))[0].files[".npy"]
    # one image a batch here, two in the CLI run: float32 sums differ by ~3e-6 m on points up to ~2 m
    assert np.allclose(via_api, np.load(known / f"{name}.npy"), rtol=1e-4, atol=2e-5)


def test_focal_is_refused_where_it_means_nothing(dense_root, tmp_path):
    normal = NormalModule(size="tiny", input_size=SIZE)
    normal.configure_model()
    normal.model.save_pretrained(tmp_path / "normal")
    args = ["--model", str(tmp_path / "normal"), "--input", str(dense_root / "val" / "images")]
    with pytest.raises(SystemExit, match="--focal is for pointmap models; normal"):
        predict.main([*args, "--out", str(tmp_path / "a"), "--focal", "300"])
    with pytest.raises(SystemExit, match="must be > 0"):
        predict.main([*args, "--out", str(tmp_path / "b"), "--focal", "0"])
    with pytest.raises(ValueError, match="only models with a metric scale"):
        normal.inference.image_outputs([np.zeros((64, 48, 3), np.uint8)], focal=300.0)
    with pytest.raises(ValueError, match="must be > 0"):
        PointmapModule(size="tiny", input_size=SIZE).inference.image_outputs([np.zeros((64, 48, 3), np.uint8)],
                                                                            focal=0.0)
