"""Albedo keeps its colours: a pure-red albedo file is red (R = 1, G = B = 0) in the batches, scores a red
prediction as perfect and a blue one as wrong, and a model that predicts red has ``predict`` write red. A reader,
a writer or a picture that swaps RGB and BGR agrees with itself everywhere else; only a colour tells."""

from __future__ import annotations

import shutil

import cv2
import numpy as np
import pytest
import torch

import sapiens2_ft
from sapiens2_ft.tasks.dense_data import DenseTaskData
from sapiens2_ft.predict.cli import main as predict
from sapiens2_ft.tasks.albedo.metric import AlbedoMetrics
from sapiens2_ft.tasks.albedo.module import AlbedoModule
from sapiens2_ft.tasks.registry import TASK_KEY

SIZE = (128, 96)
RED, BLUE = (1.0, 0.0, 0.0), (0.0, 0.0, 1.0)  # RGB


@pytest.fixture(scope="module")
def red_root(dense_root, tmp_path_factory):
    """``dense_root``'s images and masks, with an albedo file of pure red (RGB 255, 0, 0) for each image."""
    root = tmp_path_factory.mktemp("red_albedo")
    for split in ("train", "val"):
        for folder in ("images", "masks"):
            if (dense_root / split / folder).is_dir():
                shutil.copytree(dense_root / split / folder, root / split / folder)
        (root / split / "albedo").mkdir()
        for image in (root / split / "images").iterdir():
            red = np.zeros((*cv2.imread(str(image)).shape[:2], 3), np.uint8)
            red[..., 2] = 255  # OpenCV writes BGR: red is the last channel on disk
            cv2.imwrite(str(root / split / "albedo" / f"{image.stem}.png"), red)
    return root


def constant(colour, like: torch.Tensor) -> torch.Tensor:
    """A (B, 3, H, W) map of one RGB colour."""
    return torch.tensor(colour, dtype=like.dtype)[None, :, None, None].expand_as(like).clone()


def test_a_red_albedo_is_red_in_the_batches_and_scores_red_as_right(red_root):
    # one flat colour is what data.filter.min_albedo_std leaves out (a renderer's failure); here it is the point
    data = DenseTaskData("albedo", root=str(red_root), input_size=SIZE, batch_size=2, num_workers=0,
                         filter={"min_albedo_std": 0.0})
    torch.manual_seed(0)
    data.setup("fit")
    module = AlbedoModule(size="tiny", input_size=SIZE)
    for batch in (next(iter(data.train_dataloader())), next(iter(data.val_dataloader()))):
        mask = batch["mask"].reshape(batch["albedo"].shape[0], 1, *batch["albedo"].shape[-2:]).expand_as(
            batch["albedo"])
        assert mask.any()
        red = constant(RED, batch["albedo"])
        assert torch.allclose(batch["albedo"][mask], red[mask], atol=1e-5)  # warped and flipped: still red
        right = module.loss_terms({"albedo": red}, batch)["loss"]
        wrong = module.loss_terms({"albedo": constant(BLUE, red)}, batch)["loss"]
        assert right < 1e-4 < 1 < wrong
        for colour, psnr in ((RED, lambda v: v > 40), (BLUE, lambda v: v < 5)):  # 120 dB (the cap), 1.8 dB
            metric = AlbedoMetrics()
            metric.update(constant(colour, red), batch["albedo"], batch["mask"])
            assert psnr(metric.compute()["psnr"].item()), colour


@pytest.fixture(scope="module")
def red_model(tmp_path_factory):
    """An albedo model that predicts pure red everywhere (its last layer's weights 0, its bias RGB 1, 0, 0)."""
    module = AlbedoModule(size="tiny", input_size=SIZE, grey_start=True)
    module.configure_model()
    with torch.no_grad():
        module.model.decode_head.predictor.bias.copy_(torch.tensor(RED))
    setattr(module.model.config, TASK_KEY, "albedo")  # as the export records it
    out = tmp_path_factory.mktemp("red_model")
    module.model.save_pretrained(out)
    return out


def test_a_model_predicting_red_has_predict_write_red(red_model, dense_root, tmp_path):
    image = sorted((dense_root / "val" / "images").iterdir())[0]
    out = predict(["--model", str(red_model), "--input", str(image), "--out", str(tmp_path), "--workers", "0",
                   "--device", "cpu"])
    albedo = np.load(out / f"{image.stem}.npy").astype(np.float32)  # RGB
    np.testing.assert_allclose(albedo, np.broadcast_to(RED, albedo.shape), atol=1e-3)
    written = cv2.imread(str(out / f"{image.stem}_albedo.png"))  # BGR, as OpenCV reads it
    assert (written.reshape(-1, 3) == [0, 0, 255]).all()
    predictor = sapiens2_ft.load(red_model, device="cpu")
    [result] = predictor.predict(str(image))
    title, picture = predictor.inference.picture(result.files, cv2.imread(str(image))[..., ::-1], None)
    assert title == "albedo" and (picture.reshape(-1, 3) == [255, 0, 0]).all()  # RGB, as the sheets show it
