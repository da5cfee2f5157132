"""COCO-format keypoint data for top-down pose fine-tuning.

Layout (every path relative to ``root``; the defaults are the synthetic demo data)::

    root/annotations/train.json   root/train/images/...
    root/annotations/val.json     root/val/images/...

COCO 2017 is ``root=data/coco`` with ``train_ann=annotations/person_keypoints_train2017.json``,
``train_images=train2017`` and the same for val (see ``configs/pose_coco.yaml``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import lightning as L
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader

from datamodules.coco_keypoints import load_detections, load_instances
from datamodules.data_check import DataReport, check_coco, fail_or_warn
from datamodules.loaders import make_loader
from datamodules.pose_dataset import TopdownPoseDataset
from datamodules.transforms.topdown import TopdownAugment
from sapiens2_ft.metainfo import load_metainfo
from sapiens2_ft.checkpoints import plain_hparams


@dataclass
class SyntheticData:
    """Generate the synthetic demo dataset into ``root`` when it is missing.

    Args:
        num_images: Images to render (train + val).
        seed: Generator seed; the same seed gives the same files.
        val_fraction: Share of images in the val split.
        height: Image height in pixels.
        width: Image width in pixels.
    """

    num_images: int = 600
    seed: int = 0
    val_fraction: float = 0.2
    height: int = 256
    width: int = 192


class PoseDataModule(L.LightningDataModule):
    """Top-down pose samples from COCO keypoints json files.

    Args:
        root: Dataset folder; all other paths are relative to it.
        train_ann: Training annotations (COCO keypoints json).
        train_images: Folder the training ``file_name`` entries are relative to.
        val_ann: Validation annotations; also the ground truth of OKS AP.
        val_images: Folder of the validation images.
        val_detections: Optional COCO results json of person boxes to crop at validation instead of
            the ground-truth boxes.
        det_score_threshold: Detections below this score are dropped.
        keypoints: Keypoint set: built-in name (``coco17``) or a metainfo YAML path.
        input_size: Network input (H, W); the crop aspect ratio follows it.
        box_padding: Crop box = person box x this.
        min_keypoints: Training instances need at least this many labelled keypoints.
        augment: Training augmentation.
        batch_size: Samples per device per step.
        val_batch_size: Validation batch size (default: ``batch_size``).
        num_workers: DataLoader worker processes.
        pin_memory: Pin host memory for faster host-to-GPU copies.
        persistent_workers: Keep workers alive between epochs.
        on_bad_sample: ``error`` stops at the first bad record; ``skip`` counts and drops it.
        synthetic: When set, render the synthetic demo dataset into ``root`` if it is missing.
    """

    def __init__(
        self,
        root: str = "data/synthetic",
        train_ann: str = "annotations/train.json",
        train_images: str = "train/images",
        val_ann: str = "annotations/val.json",
        val_images: str = "val/images",
        val_detections: str | None = None,
        det_score_threshold: float = 0.0,
        keypoints: str = "coco17",
        input_size: tuple[int, int] = (256, 192),
        box_padding: float = 1.25,
        min_keypoints: int = 1,
        augment: TopdownAugment = TopdownAugment(),
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
        plain_hparams(self)  # checkpoints stay loadable with weights_only=True
        # Lightning's CLI stores nested dataclasses in hparams as dicts: keep the objects here.
        self.augment = TopdownAugment(**augment) if isinstance(augment, dict) else augment
        self.synthetic = SyntheticData(**synthetic) if isinstance(synthetic, dict) else synthetic
        self.root = Path(root)
        self.metainfo = load_metainfo(keypoints)
        self.train_set: TopdownPoseDataset | None = None
        self.val_set: TopdownPoseDataset | None = None
        self.skipped: dict[str, dict[str, int]] = {}

    @property
    def val_annotation_file(self) -> Path:
        return self.root / self.hparams.val_ann

    def prepare_data(self) -> None:
        if self.synthetic is not None:
            from datamodules.synthetic import ensure_dataset

            s = self.synthetic
            ensure_dataset(self.root, s.num_images, s.seed, height=s.height, width=s.width,
                           val_fraction=s.val_fraction)

    def _report(self, split: str, count: int, skipped) -> None:
        self.skipped[split] = dict(skipped)
        detail = ", ".join(f"{n} {why}" for why, n in skipped.items()) or "none"
        rank_zero_info(f"{split}: {count} person instances (skipped: {detail})")

    def check(self, decode: bool = True) -> DataReport:
        """Every problem of the train and val annotations (and, with ``decode``, of every image file)."""
        hp, report = self.hparams, DataReport()
        check_coco(self.root / hp.train_ann, self.root / hp.train_images, self.metainfo, report, "train", decode)
        check_coco(self.val_annotation_file, self.root / hp.val_images, self.metainfo, report, "val", decode)
        return report

    def setup(self, stage: str | None = None) -> None:
        hp = self.hparams
        if stage in ("fit", None) and self.train_set is None:
            report = fail_or_warn(self.check(decode=False), hp.on_bad_sample)
            train, skipped = load_instances(self.root / hp.train_ann, self.root / hp.train_images, self.metainfo,
                                            hp.min_keypoints, hp.on_bad_sample,
                                            report.bad_annotations.get(str(self.root / hp.train_ann), set()))
            self._report("train", len(train), skipped)
            self.train_set = TopdownPoseDataset(train, self.metainfo, hp.input_size, self.augment, hp.box_padding,
                                                hp.on_bad_sample)
        if stage in ("fit", "validate", None) and self.val_set is None:
            if hp.val_detections:
                val, skipped = load_detections(self.root / hp.val_detections, self.val_annotation_file,
                                               self.root / hp.val_images, self.metainfo, hp.det_score_threshold)
            else:
                val, skipped = load_instances(self.val_annotation_file, self.root / hp.val_images, self.metainfo,
                                              1, hp.on_bad_sample)
            self._report("val", len(val), skipped)
            self.val_set = TopdownPoseDataset(val, self.metainfo, hp.input_size, None, hp.box_padding, hp.on_bad_sample)

    def _loader(self, dataset, batch_size: int, shuffle: bool) -> DataLoader:
        hp = self.hparams
        return make_loader(dataset, batch_size, shuffle, hp.num_workers, hp.pin_memory, hp.persistent_workers)

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, self.hparams.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, self.hparams.val_batch_size or self.hparams.batch_size, shuffle=False)
