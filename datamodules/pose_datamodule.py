"""COCO-format keypoint data for top-down pose fine-tuning.

Layout (every path relative to ``root``; the defaults are the synthetic demo data)::

    root/annotations/train.json   root/train/images/...
    root/annotations/val.json     root/val/images/...

COCO 2017 is ``root=data/coco`` with ``train_ann=annotations/person_keypoints_train2017.json``,
``train_images=train2017`` and the same for val (see ``configs/pose_coco.yaml``).
"""

from __future__ import annotations

from pathlib import Path

from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader

from datamodules.base import SampleDataModule
from datamodules.coco_keypoints import load_detections, load_instances
from datamodules.data_check import DataReport, check_coco, fail_or_warn
from datamodules.hparams import as_dataclass
from datamodules.keypoints.metainfo import load_metainfo
from datamodules.pose_dataset import TopdownPoseDataset
from datamodules.transforms.topdown import TopdownAugment


class PoseDataModule(SampleDataModule):
    """Top-down pose samples from COCO keypoints json files (``root``, ``input_size``, loaders and
    ``synthetic``: see ``SampleDataModule``).

    Args:
        train_ann: Training annotations (COCO keypoints json).
        train_images: Folder the training ``file_name`` entries are relative to.
        val_ann: Validation annotations; also the ground truth of OKS AP.
        val_images: Folder of the validation images.
        val_detections: Optional COCO results json of person boxes to crop at validation instead of
            the ground-truth boxes.
        det_score_threshold: Detections below this score are dropped.
        keypoints: Keypoint set: built-in name (``coco17``) or a metainfo YAML path.
        box_padding: Crop box = person box x this.
        min_keypoints: Training instances need at least this many labelled keypoints.
        augment: Training augmentation.
    """

    def __init__(
        self,
        train_ann: str = "annotations/train.json",
        train_images: str = "train/images",
        val_ann: str = "annotations/val.json",
        val_images: str = "val/images",
        val_detections: str | None = None,
        det_score_threshold: float = 0.0,
        keypoints: str = "coco17",
        box_padding: float = 1.25,
        min_keypoints: int = 1,
        augment: TopdownAugment = TopdownAugment(),
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.augment = as_dataclass(TopdownAugment, augment)
        self.metainfo = load_metainfo(keypoints)
        self.train_set: TopdownPoseDataset | None = None
        self.val_set: TopdownPoseDataset | None = None

    @property
    def val_annotation_file(self) -> Path:
        return self.root / self.hparams.val_ann

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

    def train_dataloader(self) -> DataLoader:
        return self.loader(self.train_set, train=True)

    def val_dataloader(self) -> DataLoader:
        return self.loader(self.val_set, train=False)
