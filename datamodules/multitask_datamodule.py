"""Samples for multi-task pretraining: each person crop paired with its image and every dense target.

Reads a dataset in the synthetic layout (COCO keypoints json + the dense folders of ``dense.files``, as
``python -m datamodules.synthetic`` writes). The tasks are handed down as target specs by name (the task layer's
``sapiens2_ft/tasks/multitask/data.py``); one sample per person instance::

    image, name, {task: its targets} for each dense task, {crops: image (the crop), keypoints, keypoint_weights, ...}

The whole image and its targets go through one dense transform (scale, crop, flip, photometric), the
crop through the top-down pose transform; both draw from the sample's own generator.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Mapping

from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader, Dataset

from datamodules.base import SampleDataModule
from datamodules.columns import StringTable
from datamodules.coco_keypoints import load_instances
from datamodules.dense.augment import DenseAugment
from datamodules.dense_dataset import load_sample, to_item
from datamodules.dense.files import DenseSample, list_samples
from datamodules.dense.target_spec import TargetSpec
from datamodules.dense.transforms import DenseTransform
from datamodules.errors import DataError
from datamodules.hparams import as_dataclass
from datamodules.boundary.images import read_image
from datamodules.keypoints.metainfo import load_metainfo
from datamodules.loaders import is_padding, replace_bad_samples, sample_rng
from datamodules.pose_dataset import TopdownPoseDataset
from datamodules.transforms.topdown import TopdownAugment

def union_of_maps(targets: Mapping[str, TargetSpec]) -> dict:
    """The map rules of several tasks' targets (one sample holds them all); a kind two tasks move differently is a
    ValueError."""
    maps = {}
    for spec in targets.values():
        for kind, rule in spec.maps.items():
            if maps.setdefault(kind, rule) != rule:
                raise ValueError(f"the tasks {sorted(targets)} move the map {kind!r} differently")
    return maps


class MultiTaskDataset(Dataset):
    """Pose instance ``i`` -> its top-down crop (under ``crops``) plus its whole image with the targets of every
    dense task of ``targets``."""

    def __init__(self, pose: TopdownPoseDataset, dense: dict[str, dict[str, DenseSample]],
                 targets: Mapping[str, TargetSpec], crops: str, transform: DenseTransform, augment: bool,
                 on_bad_sample: Literal["error", "skip"] = "error"):
        self.pose, self.dense, self.transform = pose, dense, transform
        self.targets, self.crops = dict(targets), crops
        self.augment, self.on_bad_sample = augment, on_bad_sample
        self.stems = StringTable.of(Path(path).stem for path in pose.instances.images)  # per image
        for name in self.stems:
            missing = [task for task in self.targets if name not in dense[task]]
            if missing:
                raise DataError(f"image {name}: no dense targets for {missing} (every image needs all of them)")

    def __len__(self) -> int:
        return len(self.pose)

    def name(self, index: int) -> str:
        """The image name (file stem) of sample ``index``."""
        return self.stems[int(self.pose.instances.image_index[index])]

    def item(self, index: int, rng) -> dict:
        name = self.name(index)
        data = {"image": read_image(str(self.dense[next(iter(self.targets))][name].image))}
        for task, spec in self.targets.items():  # the image decoded once for every task's targets
            data.update(load_sample(self.dense[task][name], spec, 29, image=data["image"]))
        data = self.transform(data, rng)
        item = {"name": name, self.crops: self.pose.item(index, rng)}
        for task, spec in self.targets.items():
            target = to_item(data, spec)
            item["image"] = target.pop("image")
            item[task] = target
        return item

    def __getitem__(self, key) -> dict:
        index, rng = sample_rng(key)
        item = replace_bad_samples(lambda i: self.item(i, rng if self.augment else None), index, len(self),
                                   self.on_bad_sample)
        return {**item, "padding": is_padding(key)}


class MultiTaskDataModule(SampleDataModule):
    """Person crops + whole images with all dense targets, from a dataset in the synthetic layout (``input_size``:
    of both the images and the pose crops; loaders and ``synthetic``: see ``SampleDataModule``).

    Args:
        targets: The dense tasks' target specs by task name, handed down by the task layer.
        crops: The item key of the person crops (the top-down task's name).
        root: Dataset folder (``annotations/{train,val}.json``, ``{train,val}/images`` and the dense folders).
        keypoints: Keypoint set of the annotations (built-in name or YAML path).
        pose_augment: Augmentation of the pose crops.
        dense_augment: Augmentation of the whole images and their targets.
    """

    hparams_ignore = ("targets", "crops")  # what the task layer hands down, not hyper-parameters

    def __init__(
        self,
        targets: Mapping[str, TargetSpec],
        crops: str,
        root: str = "data/synthetic-pretrain",
        keypoints: str = "coco17",
        pose_augment: TopdownAugment = TopdownAugment(),
        dense_augment: DenseAugment = DenseAugment(),
        **kwargs,
    ):
        super().__init__(root=root, **kwargs)
        if self.store is not None:
            raise DataError("data.shards: multi-task pretraining reads the files of its dataset folder, not shards")
        self.pose_augment = as_dataclass(TopdownAugment, pose_augment)
        self.dense_augment = as_dataclass(DenseAugment, dense_augment)
        self.metainfo = load_metainfo(keypoints)
        self.targets, self.crops, self.maps = dict(targets), crops, union_of_maps(targets)
        self.sets: dict[str, MultiTaskDataset] = {}

    @property
    def val_annotation_file(self) -> Path:
        return self.root / "annotations" / "val.json"

    def _dataset(self, split: str) -> MultiTaskDataset:
        hp, train = self.hparams, split == "train"
        instances, skipped = load_instances(self.root / "annotations" / f"{split}.json", self.root / split / "images",
                                            self.metainfo, 1, hp.on_bad_sample)
        self.skipped[split] = dict(skipped)
        rank_zero_info(f"{split}: {len(instances)} person instances")
        pose = TopdownPoseDataset(instances, self.metainfo, hp.input_size, self.pose_augment if train else None,
                                  on_bad_sample=hp.on_bad_sample)
        dense = {task: {s.name: s for s in list_samples(self.root, split, spec)[0]}
                 for task, spec in self.targets.items()}
        transform = DenseTransform(hp.input_size, self.dense_augment if train else None, maps=self.maps)
        return MultiTaskDataset(pose, dense, self.targets, self.crops, transform, train, hp.on_bad_sample)

    def setup(self, stage: str | None = None) -> None:
        for split in ("train", "val") if stage in ("fit", None) else ("val",):
            if split not in self.sets:
                self.sets[split] = self._dataset(split)

    def train_dataloader(self) -> DataLoader:
        return self.loader(self.sets["train"], train=True)

    def val_dataloader(self) -> DataLoader:
        return self.loader(self.sets["val"], train=False)
