"""Samples held as numpy columns (``PoseInstances``, ``DenseSamples``) give exactly what the object lists gave."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch

from datamodules.coco_keypoints import PoseInstance, clip_box, load_instances
from datamodules.dense.files import DenseSample, DenseSamples, list_samples
from datamodules.dense_dataset import DenseDataset
from datamodules.keypoints.metainfo import load_metainfo
from datamodules.pose_dataset import TopdownPoseDataset
from datamodules.pose_instances import PoseInstances
from datamodules.transforms.topdown import TopdownAugment
from sapiens2_ft.tasks.dense_data import dense_targets

TRAIN_ANN = "annotations/person_keypoints_train2017.json"
META = load_metainfo("coco17")
KEYS = [(i, 11) for i in range(8)] + [(3, 12), (3, 13)]  # (index, epoch seed) as the training sampler gives them


def object_list(ann_file, images_dir) -> list[PoseInstance]:
    """The instances as the former loader built them: one ``PoseInstance`` per usable annotation, in file order."""
    data = json.loads(ann_file.read_text())
    images = {image["id"]: image for image in data["images"]}
    out = []
    for ann in data["annotations"]:
        points = np.asarray(ann["keypoints"], np.float32).reshape(-1, 3)
        box = clip_box(ann["bbox"], images[ann["image_id"]])
        if not ann.get("iscrowd", 0) and (points[:, 2] > 0).any() and box is not None:
            out.append(PoseInstance(str(images_dir / images[ann["image_id"]]["file_name"]), ann["image_id"],
                                    ann["id"], tuple(box), points[:, :2].copy(), points[:, 2].copy()))
    return out


def assert_items_equal(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        same = torch.equal(a[key], b[key]) if isinstance(a[key], torch.Tensor) else a[key] == b[key]
        assert same, key


def test_pose_columns_hold_and_augment_exactly_what_the_object_list_did(tiny_coco):
    listed = object_list(tiny_coco / TRAIN_ANN, tiny_coco / "train2017")
    columns, _ = load_instances(tiny_coco / TRAIN_ANN, tiny_coco / "train2017", META)
    assert isinstance(columns, PoseInstances) and len(columns) == len(listed) == 8
    for got, want in zip(columns, listed):
        assert (got.image_path, got.image_id, got.annotation_id, got.bbox, got.box_score) == (
            want.image_path, want.image_id, want.annotation_id, want.bbox, want.box_score)
        assert np.array_equal(got.keypoints, want.keypoints) and np.array_equal(got.visibility, want.visibility)
        assert got.keypoints.dtype == want.keypoints.dtype == np.float32
    assert not columns.keypoints.flags.writeable  # shared with the loader workers: never written
    assert len(columns.images) == 4  # each image path once

    arrays = TopdownPoseDataset(columns, META, (64, 48), TopdownAugment())
    objects = TopdownPoseDataset(columns, META, (64, 48), TopdownAugment())
    objects.instances = listed  # what the dataset indexed before: a list of objects
    for key in KEYS:
        assert_items_equal(arrays[key], objects[key])
    round_trip = PoseInstances.from_arrays(columns.arrays())
    assert [i.annotation_id for i in round_trip] == [i.annotation_id for i in listed]


def test_dense_columns_hold_and_augment_exactly_what_the_object_list_did(dense_root):
    samples, _ = list_samples(dense_root, "train", dense_targets("pointmap"))
    assert isinstance(samples, DenseSamples)
    listed = [DenseSample(s.name, s.image, dict(s.files)) for s in samples]
    assert DenseSamples.of(listed)[2] == listed[2] and len(samples.names) == len(listed) == 6
    arrays = DenseDataset(samples, dense_targets("pointmap"), (64, 48), augment={})
    objects = copy.copy(arrays)
    objects.samples = listed
    for key in KEYS[:3]:
        assert_items_equal(arrays[key], objects[key])
    with pytest.raises(IndexError):
        samples[len(samples)]
