"""Several training datasets in one run (``data.train``): per-dataset repeats, distinct augmentation of repeats,
keypoint sets mapped by name, dense mixes, and the counts in the run summary."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
import torch
import yaml
from conftest import COCO17, pose_run_args, write_coco

from datamodules import loaders
from datamodules.errors import DataError
from datamodules.mixing import MixedDataset, source_names
from datamodules.pose_datamodule import PoseDataModule
from sapiens2_ft.tasks.dense_data import DenseTaskData

TRAIN_ANN = "annotations/person_keypoints_train2017.json"


class Draws(torch.utils.data.Dataset):
    """Sample ``i`` of part ``part``: its index and one draw of the generator its key gives."""

    def __init__(self, size: int, part: int):
        self.size, self.part = size, part

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, key) -> dict:
        index, rng = loaders.sample_rng(key)
        return {"index": index, "part": self.part, "draw": -1.0 if rng is None else float(rng.random())}


def mixed(sizes=(4, 3), repeats=(2, 0.5)) -> MixedDataset:
    return MixedDataset([Draws(n, p) for p, n in enumerate(sizes)], list(repeats), ["a", "b"])


def epoch_items(data: MixedDataset, epoch_seed: int) -> list[dict]:
    return [data[(i, epoch_seed)] for i in range(len(data))]


def test_each_part_is_drawn_its_repeat_per_epoch():
    data = mixed()
    assert [(c.samples, c.per_epoch) for c in data.counts] == [(4, 8), (3, 2)]  # round(1.5) = 2
    assert len(data) == 10
    items = epoch_items(data, 11)
    assert Counter(i["index"] for i in items if i["part"] == 0) == {0: 2, 1: 2, 2: 2, 3: 2}
    assert all(i["source"] == i["part"] for i in items)
    subsets = {tuple(sorted(i["index"] for i in epoch_items(data, seed) if i["part"] == 1)) for seed in range(12)}
    assert all(len(set(s)) == 2 for s in subsets)  # the fractional rest: distinct samples in one epoch
    assert len(subsets) > 1  # ... and a different subset in different epochs
    assert [i["index"] for i in epoch_items(data, 5)] == [i["index"] for i in epoch_items(data, 5)]


def test_repeats_of_a_sample_are_augmented_differently():
    draws = [i["draw"] for i in epoch_items(mixed(), 3) if i["part"] == 0 and i["index"] == 1]
    assert len(draws) == 2 and draws[0] != draws[1]
    assert mixed()[2]["draw"] == -1.0  # a plain index (no sampler) stays unaugmented


def test_bad_repeat_and_names():
    with pytest.raises(DataError, match="'b': repeat must be a number > 0"):
        mixed(repeats=(1, 0))
    assert source_names([None, None, "x", None], ["data/coco", "data/coco/", "y", "/m/mine"]) == [
        "coco", "coco-2", "x", "mine"]


@pytest.mark.parametrize("workers", [0, 2])
def test_a_mixed_training_loader_resumes_mid_epoch(workers):
    def collect(start=None):
        loader = loaders.make_loader(mixed(), 2, True, workers, False, False, seed=3, start=start)
        loader.sampler.set_epoch(1)
        return [(b["part"].tolist(), b["index"].tolist(), b["draw"].tolist()) for b in loader]

    whole = collect()
    assert len(whole) == 5
    assert collect(loaders.TrainPosition(epoch=1, batches=2)) == whole[2:]


def write_subset_set(path, names) -> str:
    """A keypoint set of ``names`` (a subset of COCO-17, in another order)."""
    path.write_text(yaml.safe_dump({"name": "subset", "keypoints": names, "sigmas": [0.05] * len(names),
                                    "skeleton": [], "upper_body": names[:2], "lower_body": names[2:]}))
    return str(path)


@pytest.fixture(scope="module")
def second_set(tmp_path_factory):
    """Another dataset labelled with 5 of the COCO keypoints, in its own order."""
    root = tmp_path_factory.mktemp("subset")
    ann = write_coco(root, "imgs", "train.json", num_images=3, seed=5)
    names = ["right_knee", "left_knee", "nose", "left_hip", "right_hip"]
    data = json.loads(ann.read_text())
    for a in data["annotations"]:
        k = np.asarray(a["keypoints"]).reshape(17, 3)
        a["keypoints"] = k[[COCO17.index(n) for n in names]].reshape(-1).tolist()
    data["categories"][0]["keypoints"] = names
    ann.write_text(json.dumps(data))
    return root, write_subset_set(root / "subset.yaml", names), data


def test_pose_mix_maps_keypoint_sets_by_name(tiny_coco, second_set):
    root, subset, data = second_set
    dm = PoseDataModule(root=str(tiny_coco), val_ann="annotations/person_keypoints_val2017.json",
                        val_images="val2017", num_workers=0, batch_size=2, train=[
                            {"root": str(tiny_coco), "ann": TRAIN_ANN, "images": "train2017", "repeat": 0.5,
                             "name": "coco"},
                            {"root": str(root), "ann": "annotations/train.json", "images": "imgs",
                             "keypoints": subset, "repeat": 2, "name": "mine"}])
    dm.setup("fit")
    assert [(c.name, c.samples, c.per_epoch) for c in dm.train_counts] == [("coco", 8, 4), ("mine", 6, 12)]
    assert set(dm.skipped) == {"train/coco", "train/mine", "val"}
    mine = dm.train_set.parts[1]
    first = mine.instances[0]
    source = np.asarray(data["annotations"][0]["keypoints"]).reshape(5, 3)
    for k, name in enumerate(["right_knee", "left_knee", "nose", "left_hip", "right_hip"]):
        j = COCO17.index(name)
        np.testing.assert_allclose(first.keypoints[j], source[k, :2], rtol=1e-6)
        assert first.visibility[j] == 2
    assert (first.visibility[[COCO17.index(n) for n in COCO17 if n not in (
        "right_knee", "left_knee", "nose", "left_hip", "right_hip")]] == 0).all()
    item = dm.train_set[(len(dm.train_set) - 1, 7)]
    assert item["source"] == 1 and item["keypoint_weights"][COCO17.index("left_eye")] == 0
    batch = next(iter(dm.train_dataloader()))
    assert batch["source"].shape == (2,)


def test_pose_mix_with_no_shared_keypoints_is_an_error(tiny_coco, second_set, tmp_path):
    root, _, data = second_set
    other = write_subset_set(tmp_path / "other.yaml", ["a", "b", "c", "d", "e"])
    relabelled = tmp_path / "other.json"  # the same people labelled with the other set's names
    relabelled.write_text(json.dumps({**data, "categories": [{**data["categories"][0], "keypoints": list("abcde")}]}))
    dm = PoseDataModule(root=str(tiny_coco), val_ann="annotations/person_keypoints_val2017.json",
                        val_images="val2017", num_workers=0, train=[
                            {"root": str(root), "ann": str(relabelled), "images": "imgs", "keypoints": other}])
    with pytest.raises(DataError, match="share no keypoint names"):
        dm.setup("fit")
    mislabelled = PoseDataModule(root=str(tiny_coco), val_ann="annotations/person_keypoints_val2017.json",
                                 val_images="val2017", num_workers=0, train=[
                                     {"root": str(root), "ann": "annotations/train.json", "images": "imgs",
                                      "keypoints": other}])
    with pytest.raises(DataError, match="its keypoint names are not those of the keypoint set 'subset'"):
        mislabelled.setup("fit")


def test_data_check_names_the_mixed_dataset(tiny_coco, tmp_path):
    dm = PoseDataModule(root=str(tiny_coco), val_ann="annotations/person_keypoints_val2017.json",
                        val_images="val2017", train=[{"root": str(tmp_path), "name": "gone"}])
    report = dm.check(decode=False)
    assert report.fatal and str(tmp_path / "annotations" / "train.json") in report.format()


def test_dense_mix(dense_root):
    dm = DenseTaskData("seg", root=str(dense_root), input_size=(64, 48), num_workers=0, batch_size=2, train=[
        {"root": str(dense_root), "repeat": 1.5}, {"root": str(dense_root), "split": "val", "name": "extra"}])
    assert not dm.check(decode=False).fatal
    dm.setup("fit")
    assert [(c.name, c.samples, c.per_epoch) for c in dm.train_counts] == [("synthetic", 6, 9), ("extra", 2, 2)]
    batch = next(iter(dm.train_dataloader()))
    assert batch["labels"].shape == (2, 64, 48) and batch["source"].shape == (2,)


def test_a_mixed_run_reports_its_datasets(tiny_coco, tiny_pose308_dir, second_set, tmp_path):
    from sapiens2_ft.training.cli import main

    root, subset, _ = second_set
    mix = [{"root": str(tiny_coco), "ann": TRAIN_ANN, "images": "train2017"},
           {"root": str(root), "ann": "annotations/train.json", "images": "imgs", "keypoints": subset, "repeat": 3}]
    summary = main(pose_run_args(tiny_coco, tiny_pose308_dir, tmp_path / "run", 3, "--tracking.logger", "csv",
                                 "--export", "false", "--data.train", json.dumps(mix)))
    got = summary["train_datasets"]
    names = tiny_coco.name, root.name  # the root folders' names
    assert {k: (v["samples"], v["per_epoch"]) for k, v in got.items()} == {names[0]: (8, 8), names[1]: (6, 18)}
    assert sum(v["drawn"] for v in got.values()) == 3 * 2  # 3 steps of batch 2
    metrics = (tmp_path / "run" / "metrics.csv").read_text().splitlines()[0]
    assert all(f"data/samples/{name}" in metrics for name in names)
    saved = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=True)
    assert saved["datamodule_hyper_parameters"]["train"][1]["repeat"] == 3
