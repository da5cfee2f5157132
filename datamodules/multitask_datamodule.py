"""Samples for multi-task pretraining: each person crop paired with its image and every dense target.

Reads a dataset in the synthetic layout (COCO keypoints json + the dense folders of ``dense_files``, as
``python -m datamodules.synthetic`` writes). One sample per person instance::

    image, name, seg {labels}, normal {normals, mask}, pointmap {pointmap, mask, scale, intrinsics},
    matting {alpha, foreground, has_foreground}, pose {image (the crop), keypoints, keypoint_weights, ...}

The whole image and its targets go through one dense transform (scale, crop, flip, photometric), the
crop through the top-down pose transform; both draw from the sample's own generator.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import lightning as L
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader, Dataset

from datamodules import dense_files as files
from datamodules.coco_keypoints import DataError, load_instances
from datamodules.dense_dataset import load_sample, to_item
from datamodules.dense_augment import DenseAugment
from datamodules.dense_transforms import DenseTransform
from datamodules.loaders import is_padding, make_loader, replace_bad_samples, sample_rng
from datamodules.pose_datamodule import SyntheticData
from datamodules.pose_dataset import TopdownPoseDataset
from datamodules.transforms.topdown import TopdownAugment
from sapiens2_ft.checkpoints import plain_hparams
from sapiens2_ft.metainfo import load_metainfo

DENSE_TASKS = ("seg", "normal", "pointmap", "matting")


class MultiTaskDataset(Dataset):
    """Pose instance ``i`` -> its top-down crop plus its whole image with the targets of every dense task."""

    def __init__(self, pose: TopdownPoseDataset, dense: dict[str, dict[str, files.DenseSample]],
                 transform: DenseTransform, augment: bool, on_bad_sample: Literal["error", "skip"] = "error"):
        self.pose, self.dense, self.transform = pose, dense, transform
        self.augment, self.on_bad_sample = augment, on_bad_sample
        self.names = [Path(inst.image_path).stem for inst in pose.instances]
        for name in set(self.names):
            missing = [task for task in DENSE_TASKS if name not in dense[task]]
            if missing:
                raise DataError(f"image {name}: no dense targets for {missing} (every image needs all of them)")

    def __len__(self) -> int:
        return len(self.pose)

    def item(self, index: int, rng) -> dict:
        name = self.names[index]
        data = {}
        for task in DENSE_TASKS:
            data.update(load_sample(self.dense[task][name], task, 29))
        data = self.transform(data, rng)
        item = {"name": name, "pose": self.pose.item(index, rng)}
        for task in DENSE_TASKS:
            target = to_item(data, task)
            item["image"] = target.pop("image")
            item[task] = target
        return item

    def __getitem__(self, key) -> dict:
        index, rng = sample_rng(key)
        item = replace_bad_samples(lambda i: self.item(i, rng if self.augment else None), index, len(self),
                                   self.on_bad_sample)
        return {**item, "padding": is_padding(key)}


class MultiTaskDataModule(L.LightningDataModule):
    """Person crops + whole images with all dense targets, from a dataset in the synthetic layout.

    Args:
        root: Dataset folder (``annotations/{train,val}.json``, ``{train,val}/images`` and the dense folders).
        keypoints: Keypoint set of the annotations (built-in name or YAML path).
        input_size: Network input (H, W) of both the images and the pose crops.
        pose_augment: Augmentation of the pose crops.
        dense_augment: Augmentation of the whole images and their targets.
        batch_size: Samples (person crop + image) per step.
        val_batch_size: Validation batch size (default: ``batch_size``).
        num_workers: DataLoader worker processes.
        pin_memory: Pin host memory for faster host-to-GPU copies.
        persistent_workers: Keep workers alive between epochs.
        on_bad_sample: ``error`` stops at the first bad record; ``skip`` counts and drops it.
        synthetic: Render the synthetic dataset into ``root`` when it is missing.
    """

    def __init__(
        self,
        root: str = "data/synthetic-pretrain",
        keypoints: str = "coco17",
        input_size: tuple[int, int] = (256, 192),
        pose_augment: TopdownAugment = TopdownAugment(),
        dense_augment: DenseAugment = DenseAugment(),
        batch_size: int = 16,
        val_batch_size: int | None = None,
        num_workers: int = 2,
        pin_memory: bool = True,
        persistent_workers: bool = True,
        on_bad_sample: Literal["error", "skip"] = "error",
        synthetic: SyntheticData | None = None,
    ):
        super().__init__()
        self.save_hyperparameters()
        plain_hparams(self)
        self.pose_augment = TopdownAugment(**pose_augment) if isinstance(pose_augment, dict) else pose_augment
        self.dense_augment = DenseAugment(**dense_augment) if isinstance(dense_augment, dict) else dense_augment
        self.synthetic = SyntheticData(**synthetic) if isinstance(synthetic, dict) else synthetic
        self.root = Path(root)
        self.metainfo = load_metainfo(keypoints)
        self.sets: dict[str, MultiTaskDataset] = {}
        self.skipped: dict[str, dict[str, int]] = {}

    @property
    def val_annotation_file(self) -> Path:
        return self.root / "annotations" / "val.json"

    def prepare_data(self) -> None:
        if self.synthetic is not None:
            from datamodules.synthetic import ensure_dataset

            s = self.synthetic
            ensure_dataset(self.root, s.num_images, s.seed, height=s.height, width=s.width,
                           val_fraction=s.val_fraction)

    def _dataset(self, split: str) -> MultiTaskDataset:
        hp, train = self.hparams, split == "train"
        instances, skipped = load_instances(self.root / "annotations" / f"{split}.json", self.root / split / "images",
                                            self.metainfo, 1, hp.on_bad_sample)
        self.skipped[split] = dict(skipped)
        rank_zero_info(f"{split}: {len(instances)} person instances")
        pose = TopdownPoseDataset(instances, self.metainfo, hp.input_size, self.pose_augment if train else None,
                                  on_bad_sample=hp.on_bad_sample)
        dense = {task: {s.name: s for s in files.list_samples(self.root, split, task)[0]} for task in DENSE_TASKS}
        transform = DenseTransform(hp.input_size, self.dense_augment if train else None)
        return MultiTaskDataset(pose, dense, transform, train, hp.on_bad_sample)

    def setup(self, stage: str | None = None) -> None:
        for split in ("train", "val") if stage in ("fit", None) else ("val",):
            if split not in self.sets:
                self.sets[split] = self._dataset(split)

    def _loader(self, split: str, batch_size: int) -> DataLoader:
        hp = self.hparams
        return make_loader(self.sets[split], batch_size, split == "train", hp.num_workers, hp.pin_memory,
                           hp.persistent_workers)

    def train_dataloader(self) -> DataLoader:
        return self._loader("train", self.hparams.batch_size)

    def val_dataloader(self) -> DataLoader:
        return self._loader("val", self.hparams.val_batch_size or self.hparams.batch_size)
