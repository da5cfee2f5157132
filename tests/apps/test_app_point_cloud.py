"""The web demo offers a pointmap model's point cloud for download: the ``.ply`` that ``predict`` writes of the same
photo, the people the seg model beside it finds; a page without a pointmap model keeps its two outputs."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch
from ply_reader import read_ply

from sapiens2_ft.app.page import build_page
from sapiens2_ft.app.service import Demo
from sapiens2_ft.predict.run import Model
from sapiens2_ft.tasks.pointmap.module import PointmapModule
from sapiens2_ft.tasks.seg.module import SegmentationModule


@pytest.fixture(scope="module")
def demo():
    models = []
    for seed, cls in ((0, PointmapModule), (1, SegmentationModule)):
        torch.manual_seed(seed)
        module = cls(size="tiny", input_size=(128, 96))
        module.configure_model()
        models.append(Model(module.inference.to("cpu"), module.inference.task))
    return Demo(models)


def photo_file(folder, name="my photo.png"):
    image = np.random.default_rng(0).integers(0, 256, (80, 60, 3), dtype=np.uint8)
    cv2.imwrite(str(folder / name), image[..., ::-1])
    return folder / name, image


def endpoint(page, name: str):
    return next(block.fn for block in page.fns.values() if block.api_name == name)


def test_the_page_offers_the_people_s_point_cloud(demo, tmp_path):
    path, image = photo_file(tmp_path)
    (tmp_path / "scratch").mkdir()
    page = build_page(demo, ["pointmap", "seg"], tmp_path / "scratch")
    pictures, found, files = endpoint(page, "photo")(str(path))
    assert [title for _, title in pictures] == ["inverse depth", "body parts", "sheet"]
    [ply] = files
    assert ply.endswith("/my_photo.ply") and ply.startswith(str(tmp_path / "scratch"))
    points, colours, _ = read_ply(ply)
    results = demo.results(image)  # what predict would write of this photo
    people, xyz = results["seg"].files[".png"] > 0, results["pointmap"].files[".npy"]
    kept = people & (xyz[..., 2] > 0)  # an untrained model puts some points behind the camera
    assert 0 < len(points) == kept.sum() < people.sum() < people.size  # the seg model's people, no background
    assert np.abs(points - xyz[kept]).max() < 1e-3 and np.array_equal(colours, image[kept])
    assert set(found["pointmap"]["intrinsics"]) == {"fx", "fy", "cx", "cy"}


def test_a_page_without_a_pointmap_model_offers_nothing(demo, tmp_path):
    path, _ = photo_file(tmp_path)
    seg_only = Demo(demo.models[1:])
    assert seg_only.downloads == [] and demo.downloads == [".ply"]
    assert len(endpoint(build_page(seg_only, ["seg"], tmp_path), "photo")(str(path))) == 2
