"""The checked COCO index cache: read back instead of rebuilt, rebuilt when a key changes, never unpickled."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
from conftest import write_coco

import datamodules.coco_index as coco_index
from datamodules.columns import StringTable
from datamodules.errors import DataError
from datamodules.pose_datamodule import PoseDataModule

TRAIN_ANN = "annotations/person_keypoints_train2017.json"
VAL_ANN = "annotations/person_keypoints_val2017.json"


@pytest.fixture
def cached(tmp_path, monkeypatch):
    """The index cache files of this test (the user's cache made a folder of its own)."""
    monkeypatch.setenv("SAPIENS2_FT_CACHE", str(tmp_path / "user-cache"))
    return lambda: sorted((tmp_path / "user-cache" / "index").iterdir())


@pytest.fixture
def coco(tmp_path, cached) -> Path:
    write_coco(tmp_path, "train2017", "person_keypoints_train2017.json", num_images=3, seed=5)
    write_coco(tmp_path, "val2017", "person_keypoints_val2017.json", num_images=1, seed=6)
    return tmp_path


def datamodule(root: Path, **kwargs) -> PoseDataModule:
    kwargs = {"train_images": "train2017", **kwargs}
    return PoseDataModule(root=str(root), train_ann=TRAIN_ANN, val_ann=VAL_ANN, val_images="val2017", num_workers=0,
                          batch_size=2, **kwargs)


@pytest.fixture
def builds(monkeypatch) -> list:
    """The jsons whose index is built (not read from the cache)."""
    built = []
    real = coco_index.build_index
    monkeypatch.setattr(coco_index, "build_index", lambda source: built.append(source.ann_file.name) or real(source))
    return built


def fit(root: Path, **kwargs) -> PoseDataModule:
    dm = datamodule(root, **kwargs)
    dm.setup("fit")
    return dm


def test_the_first_process_builds_the_index_and_the_others_read_it(coco, builds, cached):
    datamodule(coco).prepare_data()  # what Lightning runs on each node's first process before the others' setup
    assert sorted(builds) == ["person_keypoints_train2017.json", "person_keypoints_val2017.json"]
    names = [p.name for p in cached()]
    assert len(names) == 2 and all(name.endswith(".npz") for name in names)
    builds.clear()
    dm = fit(coco)
    assert builds == []  # both read from the cache
    fresh = fit(coco, index_cache=False)
    assert sorted(builds) == ["person_keypoints_train2017.json", "person_keypoints_val2017.json"]
    assert dm.skipped == fresh.skipped and len(dm.train_set) == len(fresh.train_set) == 6
    assert len(dm.val_set) == len(fresh.val_set) == 2
    for a, b in [*zip(dm.train_set.instances, fresh.train_set.instances),
                 *zip(dm.val_set.instances, fresh.val_set.instances)]:
        assert (a.image_path, a.annotation_id, a.bbox) == (b.image_path, b.annotation_id, b.bbox)
        assert np.array_equal(a.keypoints, b.keypoints) and np.array_equal(a.visibility, b.visibility)
    for path in cached():  # no pickles: readable without them
        with np.load(path, allow_pickle=False) as stored:
            assert all(stored[name].dtype != object for name in stored.files)


@pytest.mark.parametrize("change", ["content", "min_keypoints", "box_padding", "input_size", "images", "keypoints",
                                    "cache_dir"])
def test_a_changed_key_rebuilds_the_index(coco, builds, tmp_path_factory, change):
    fit(coco)
    builds.clear()
    options = {}
    if change == "content":  # same size and mtime: only the content hash tells
        ann = coco / TRAIN_ANN
        stat, text = ann.stat(), ann.read_text()
        ann.write_text(text.replace('"iscrowd": 0', '"iscrowd": 1', 1))
        os.utime(ann, ns=(stat.st_atime_ns, stat.st_mtime_ns))
        assert ann.stat().st_size == stat.st_size
    elif change == "keypoints":
        subset = tmp_path_factory.mktemp("sets") / "face.yaml"  # the json labelled with 5 of its 17 names
        subset.write_text("name: face\nkeypoints: [nose, left_eye, right_eye, left_ear, right_ear]\n"
                          "sigmas: [0.026, 0.025, 0.025, 0.035, 0.035]\n")
        options = {"train": [{"root": str(coco), "ann": TRAIN_ANN, "images": "train2017", "keypoints": str(subset)}]}
    elif change == "cache_dir":
        options = {"cache_dir": str(tmp_path_factory.mktemp("elsewhere"))}
    elif change == "input_size":  # another W / H: the keypoint-coverage check's crop differs
        options = {"input_size": (256, 256)}
    elif change == "images":  # the same json over another copy of the images
        shutil.copytree(coco / "train2017", coco / "copy")
        options = {"train_images": "copy"}
    else:
        options = {change: {"min_keypoints": 3, "box_padding": 1.5}[change]}
    dm = fit(coco, **options)
    assert "person_keypoints_train2017.json" in builds
    if change == "content":
        assert dm.skipped["train"] == {"crowd": 1}
        builds.clear()
        fit(coco)
        assert builds == []  # the changed json's index is cached in turn


def test_an_index_built_skipping_a_bad_record_does_not_hide_it_from_a_run_that_refuses_them(coco, builds):
    data = json.loads((coco / TRAIN_ANN).read_text())
    data["annotations"][0]["bbox"] = [1, 2, -3, 4]
    (coco / TRAIN_ANN).write_text(json.dumps(data))
    assert len(fit(coco, on_bad_sample="skip").train_set) == 5  # cached without the bad record
    with pytest.raises(DataError, match="field 'bbox'|bbox: width and height > 0"):
        fit(coco)  # on_bad_sample="error": built again, and refused
    assert builds.count("person_keypoints_train2017.json") == 2


def test_a_cache_file_of_another_key_or_broken_is_not_used(coco, builds, cached):
    fit(coco)
    for path in cached():
        path.write_bytes(path.read_bytes()[:100])  # cut short
    builds.clear()
    assert len(fit(coco).train_set) == 6 and len(builds) == 2


def test_a_failed_check_is_not_cached_and_an_unwritable_folder_is_a_warning(coco, builds, tmp_path):
    data = json.loads((coco / TRAIN_ANN).read_text())
    data["annotations"][0]["bbox"] = [1, 2, -3, 4]
    (coco / TRAIN_ANN).write_text(json.dumps(data))
    for _ in range(2):
        with pytest.raises(DataError, match="field 'bbox'|bbox: width and height > 0"):
            fit(coco)
    assert builds.count("person_keypoints_train2017.json") == 2
    blocked = tmp_path / "blocked"
    blocked.write_text("a file where the cache folder would go")
    with pytest.warns(UserWarning, match="cannot cache the data index"):
        dm = fit(coco, on_bad_sample="skip", cache_dir=str(blocked / "sub"))
    assert len(dm.train_set) == 5


def test_a_cache_file_naming_images_outside_the_folder_is_not_used(coco, builds, cached):
    """A cache file written by someone else cannot lead the loader outside the image folder (as the json cannot)."""
    dm = fit(coco)
    path = next(p for p in cached() if p.name.startswith("person_keypoints_train"))
    with np.load(path, allow_pickle=False) as stored:
        arrays = {name: stored[name] for name in stored.files}
    prefix = f"{coco / 'train2017'}/"
    names = ["../../secret.jpg"] + [n.removeprefix(prefix) for n in list(dm.train_set.instances.images)[1:]]
    arrays.update(StringTable.of(names).arrays("images"))
    np.savez(path, **arrays)
    builds.clear()
    again = fit(coco)
    assert builds == ["person_keypoints_train2017.json"]  # rebuilt from the json
    assert all(path.startswith(str(coco / "train2017")) for path in again.train_set.instances.images)
