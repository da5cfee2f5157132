"""Multi-task pretraining samples: the whole image with every dense task's targets plus one person's crop."""

from __future__ import annotations

import numpy as np
import torch

import datamodules.boundary.images as images
import datamodules.dense_dataset as dense_dataset
from datamodules.dense_dataset import load_sample, to_item
import datamodules.multitask_datamodule as multitask
from sapiens2_ft.tasks.dense_data import dense_targets
from sapiens2_ft.tasks.multitask.data import PretrainingData
from sapiens2_ft.tasks.multitask.tasks import PRETRAINING_DENSE_TASKS


def test_an_item_holds_every_tasks_targets_of_one_image_read_once(dense_root, monkeypatch):
    dm = PretrainingData(root=str(dense_root), input_size=(256, 192), batch_size=2, num_workers=0)
    dm.setup("fit")
    dataset = dm.sets["train"]
    index = 1
    name = dataset.name(index)
    # The item re-derived task by task, each task's targets loaded with its own read of the image, then the same
    # dense transform and pose crop with the same generator.
    data = {}
    for task in PRETRAINING_DENSE_TASKS:
        data.update(load_sample(dataset.dense[task][name], dense_targets(task), 29))
    data = dataset.transform(data, np.random.default_rng(5))
    expected = {task: to_item(data, dense_targets(task)) for task in PRETRAINING_DENSE_TASKS}

    reads = []
    counting = lambda path: reads.append(path) or images.read_image(path)  # noqa: E731
    monkeypatch.setattr(multitask, "read_image", counting)
    monkeypatch.setattr(dense_dataset, "read_image", counting)
    item = dataset.item(index, np.random.default_rng(5))
    assert len(reads) == 1  # one decode of the image for the four tasks (the pose crop reads it on its own)
    for task in PRETRAINING_DENSE_TASKS:
        want = expected[task]
        assert torch.equal(item["image"], want.pop("image"))
        assert set(item[task]) == set(want), task
        for key, value in want.items():
            assert torch.equal(torch.as_tensor(item[task][key]), torch.as_tensor(value)), (task, key)
    assert item["pose"]["keypoints"].shape[-1] == 2 and item["name"] == name
