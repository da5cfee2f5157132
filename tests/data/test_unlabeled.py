"""``data.unlabeled``: a folder of images nobody labelled, read through the boundary, one image per training sample."""

from __future__ import annotations

import cv2
import numpy as np
import pytest
import torch

from bombs import write_bombs
from datamodules.errors import DataError
from datamodules.loaders import PaddingKey
from datamodules.unlabeled import UnlabeledImages, WithUnlabeled, fit_to, list_unlabeled, whole_image_matrix

SIZE = (64, 48)


def photo(path, shape=(90, 60), value=200):
    path.parent.mkdir(parents=True, exist_ok=True)
    image = np.zeros((*shape, 3), np.uint8)
    image[:, : shape[1] // 2] = value  # left half bright: a flip shows
    cv2.imwrite(str(path), image)
    return path


class Labelled(torch.utils.data.Dataset):
    """Five labelled samples that take any key, as the datasets do."""

    def __len__(self) -> int:
        return 5

    def __getitem__(self, key) -> dict:
        return {"image": torch.zeros(3, *SIZE)}


def test_the_folder_is_listed_without_its_links_and_each_sample_brings_one_image(tmp_path):
    folder = tmp_path / "photos"
    for name in ("a.jpg", "sub/b.png", "c.webp"):
        photo(folder / name)
    (folder / "notes.txt").write_text("not an image")
    secret = photo(tmp_path / "outside" / "secret.png")
    (folder / "link.png").symlink_to(secret)
    (folder / "linked_dir").symlink_to(secret.parent)
    paths = list_unlabeled(folder)
    assert sorted(p.relative_to(folder).as_posix() for p in paths) == ["a.jpg", "c.webp", "sub/b.png"]
    unlabeled = UnlabeledImages(paths, SIZE, fit_to(whole_image_matrix, SIZE), flip_prob=0.0)
    dataset = WithUnlabeled(Labelled(), unlabeled)
    item = dataset[(3, 7)]  # the training sampler's key: drawn by the sample's own generator, reproducibly
    assert item["unlabeled"].shape == (3, *SIZE) and item["unlabeled"].dtype == torch.uint8
    assert torch.equal(item["unlabeled"], dataset[(3, 7)]["unlabeled"])
    # the whole 90x60 image fills the 64x48 crop of the same aspect: its left half is the bright one
    picture = dataset[0]["unlabeled"][0].float()
    assert picture[:, 4:20].mean() > 150 and picture[:, 28:44].mean() < 50
    assert torch.equal(dataset[PaddingKey(1)]["unlabeled"], dataset[1]["unlabeled"])


def test_a_random_flip_mirrors_the_image(tmp_path):
    paths = [photo(tmp_path / "a.png")]
    flipped = UnlabeledImages(paths, SIZE, fit_to(whole_image_matrix, SIZE), flip_prob=1.0)
    plain = UnlabeledImages(paths, SIZE, fit_to(whole_image_matrix, SIZE), flip_prob=0.0)
    rng = np.random.default_rng(0)
    assert torch.equal(flipped.image(0, rng), plain.image(0, rng).flip(-1))


def test_hostile_folders_are_refused_by_name(tmp_path):
    with pytest.raises(DataError, match="no images"):
        list_unlabeled(tmp_path)
    photo(tmp_path / "real" / "a.png")
    (tmp_path / "via_link").symlink_to(tmp_path / "real")
    with pytest.raises(DataError, match="symbolic link"):
        list_unlabeled(tmp_path / "via_link")
    bombs = tmp_path / "bombs"
    names = write_bombs(bombs)  # huge images, one with a lying header
    unlabeled = UnlabeledImages(list_unlabeled(bombs), SIZE, fit_to(whole_image_matrix, SIZE))
    assert len(unlabeled) == len(names)
    for index in range(len(unlabeled)):
        with pytest.raises(DataError, match="pixels|cannot read"):
            unlabeled.image(index, None)
