"""Samples for multi-task pretraining: each person crop paired with its image and every dense target.

Reads a dataset in the synthetic layout (COCO keypoints json + the dense folders of ``dense.files``, as
``python -m datamodules.synthetic`` writes). One sample per person instance::

    image, name, seg {labels}, normal {normals, mask}, pointmap {pointmap, mask, scale, intrinsics},
    matting {alpha, foreground, has_foreground}, pose {image (the crop), keypoints, keypoint_weights, ...}

The whole image and its targets go through one dense transform (scale, crop, flip, photometric), the
crop through the top-down pose transform; both draw from the sample's own generator.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader, Dataset

from datamodules.base import SampleDataModule
from datamodules.columns import StringTable
from datamodules.coco_keypoints import load_instances
from datamodules.dense.augment import DenseAugment
from datamodules.dense_dataset import load_sample, to_item
from datamodules.dense.files import DenseSample, list_samples
from datamodules.dense.transforms import DenseTransform
from datamodules.errors import DataError
from datamodules.hparams import as_dataclass
from datamodules.boundary.images import read_image
from datamodules.keypoints.metainfo import load_metainfo
from datamodules.loaders import is_padding, replace_bad_samples, sample_rng
from datamodules.pose_dataset import TopdownPoseDataset
from datamodules.transforms.topdown import TopdownAugment

# The dense tasks of the demo backbone's pretraining (the synthetic renderer makes targets for each). A fixed list:
# a dense task added later joins the pretraining only when added here, with its targets in the data.
PRETRAINING_DENSE_TASKS = ("seg", "normal", "pointmap", "matting")


class MultiTaskDataset(Dataset):
    """Pose instance ``i`` -> its top-down crop plus its whole image with the targets of every dense task."""

    def __init__(self, pose: TopdownPoseDataset, dense: dict[str, dict[str, DenseSample]],
                 transform: DenseTransform, augment: bool, on_bad_sample: Literal["error", "skip"] = "error"):
        self.pose, self.dense, self.transform = pose, dense, transform
        self.augment, self.on_bad_sample = augment, on_bad_sample
        self.stems = StringTable.of(Path(path).stem for path in pose.instances.images)  # per image
        for name in self.stems:
            missing = [task for task in PRETRAINING_DENSE_TASKS if name not in dense[task]]
            if missing:
                raise DataError(f"image {name}: no dense targets for {missing} (every image needs all of them)")

    def __len__(self) -> int:
        return len(self.pose)

    def name(self, index: int) -> str:
        """The image name (file stem) of sample ``index``."""
        return self.stems[int(self.pose.instances.image_index[index])]

    def item(self, index: int, rng) -> dict:
        name = self.name(index)
        data = {"image": read_image(str(self.dense[PRETRAINING_DENSE_TASKS[0]][name].image))}
        for task in PRETRAINING_DENSE_TASKS:  # the image decoded once for the four tasks' targets
            data.update(load_sample(self.dense[task][name], task, 29, image=data["image"]))
        data = self.transform(data, rng)
        item = {"name": name, "pose": self.pose.item(index, rng)}
        for task in PRETRAINING_DENSE_TASKS:
            target = to_item(data, task)
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
        root: Dataset folder (``annotations/{train,val}.json``, ``{train,val}/images`` and the dense folders).
        keypoints: Keypoint set of the annotations (built-in name or YAML path).
        pose_augment: Augmentation of the pose crops.
        dense_augment: Augmentation of the whole images and their targets.
    """

    def __init__(
        self,
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
        dense = {task: {s.name: s for s in list_samples(self.root, split, task)[0]} for task in PRETRAINING_DENSE_TASKS}
        transform = DenseTransform(hp.input_size, self.dense_augment if train else None)
        return MultiTaskDataset(pose, dense, transform, train, hp.on_bad_sample)

    def setup(self, stage: str | None = None) -> None:
        for split in ("train", "val") if stage in ("fit", None) else ("val",):
            if split not in self.sets:
                self.sets[split] = self._dataset(split)

    def train_dataloader(self) -> DataLoader:
        return self.loader(self.sets["train"], train=True)

    def val_dataloader(self) -> DataLoader:
        return self.loader(self.sets["val"], train=False)
