"""Dense-task (segmentation, normals, pointmap, matting) DataModule; file layout in ``dense_files``."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Literal

import lightning as L
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader

from datamodules.data_check import DataReport, check_dense, fail_or_warn
from datamodules.dense_augment import DenseAugment, resolve_augment, validation_fit
from datamodules.dense_dataset import DenseDataset
from datamodules.dense_files import TASKS, list_samples
from datamodules.dense_filters import DenseFilter
from datamodules.dense_transforms import flip_classes_from_names
from datamodules.loaders import make_loader
from datamodules.pose_datamodule import SyntheticData
from sapiens2_ft.body_parts import resolve_class_names
from sapiens2_ft.checkpoints import plain_hparams


class DenseDataModule(L.LightningDataModule):
    """Per-pixel targets of one ``task`` from ``root/{split}/...`` folders matched by file stem.

    Args:
        task: ``seg``, ``normal``, ``pointmap`` or ``matting``.
        root: Dataset folder; splits are sub-folders of it.
        train_split: Training split folder.
        val_split: Validation split folder.
        input_size: Network input (H, W).
        num_classes: Segmentation classes (label values >= this, other than 255, are an error).
        class_names: Segmentation class names (default: the Sapiens2 29 classes when ``num_classes=29``).
        flip_classes: Index map of classes swapped by a horizontal flip (default: Left_* <-> Right_*
            pairs of ``class_names``).
        augment: Training augmentation; unset fields take the task's upstream defaults (matting: the
            generic set). Validation resizes as the training pipeline's last step (seg: stretched to
            ``input_size``; the others: letterboxed).
        filter: Checks that leave a training sample out after augmentation (upstream's; counted in
            ``summary.json`` as ``filtered_samples``).
        batch_size: Samples per device per step.
        val_batch_size: Validation batch size (default: ``batch_size``).
        num_workers: DataLoader worker processes.
        pin_memory: Pin host memory for faster host-to-GPU copies.
        persistent_workers: Keep workers alive between epochs.
        on_bad_sample: ``error`` stops at the first bad sample; ``skip`` counts and drops it.
        synthetic: When set, render the synthetic demo dataset into ``root`` if it is missing.
    """

    def __init__(
        self,
        task: Literal["seg", "normal", "pointmap", "matting"] = "seg",
        root: str = "data/synthetic",
        train_split: str = "train",
        val_split: str = "val",
        input_size: tuple[int, int] = (256, 192),
        num_classes: int = 29,
        class_names: list[str] | None = None,
        flip_classes: list[int] | None = None,
        augment: DenseAugment = DenseAugment(),
        filter: DenseFilter = DenseFilter(),
        batch_size: int = 16,
        val_batch_size: int | None = None,
        num_workers: int = 2,
        pin_memory: bool = True,
        persistent_workers: bool = True,
        on_bad_sample: Literal["error", "skip"] = "error",
        synthetic: SyntheticData | None = None,
    ):
        super().__init__()
        if task not in TASKS:
            raise ValueError(f"dense_datamodule.py: unknown task {task!r}; expected one of {TASKS}")
        # The class set is the model's hyper-parameter (linked, resolved); from the CLI this one would stay
        # unresolved and Lightning refuses to merge differing values.
        self.save_hyperparameters(ignore=["class_names"])
        plain_hparams(self)  # checkpoints stay loadable with weights_only=True
        # Lightning's CLI stores nested dataclasses in hparams as dicts: keep the objects here. hparams keep
        # augment as given (unset = the task's default, resolved the same way on every load).
        self.augment = resolve_augment(augment, task)
        self.filter = DenseFilter(**filter) if isinstance(filter, dict) else filter
        self.synthetic = SyntheticData(**synthetic) if isinstance(synthetic, dict) else synthetic
        self.root = Path(root)
        self.class_names = class_names = resolve_class_names(num_classes, class_names)
        if flip_classes is None:
            flip_classes = flip_classes_from_names(class_names)
        self.flip_classes = list(flip_classes)
        self.train_set: DenseDataset | None = None
        self.val_set: DenseDataset | None = None
        self.skipped: dict[str, dict[str, int]] = {}

    def prepare_data(self) -> None:
        if self.synthetic is not None:
            from datamodules.synthetic import ensure_dataset

            s = self.synthetic
            ensure_dataset(self.root, s.num_images, s.seed, height=s.height, width=s.width,
                           val_fraction=s.val_fraction)

    def _dataset(self, split: str, augment: DenseAugment | None) -> DenseDataset:
        hp = self.hparams
        samples, skipped = list_samples(self.root, split, hp.task, hp.on_bad_sample)
        self.skipped[split] = dict(skipped)
        detail = ", ".join(f"{n} {why}" for why, n in skipped.items()) or "none"
        rank_zero_info(f"{split}: {len(samples)} {hp.task} images (skipped: {detail})")
        filter = self.filter if augment is not None or self.filter.val else None
        return DenseDataset(samples, hp.task, hp.input_size, hp.num_classes, self.flip_classes, augment,
                            hp.on_bad_sample, filter=filter, fit=validation_fit(self.augment, hp.task))

    def check(self, decode: bool = True) -> DataReport:
        """Every problem of the train and val splits: missing targets, and with ``decode`` every file's content."""
        hp, report = self.hparams, DataReport()
        for split in (hp.train_split, hp.val_split):
            check_dense(self.root, split, hp.task, hp.num_classes, report, decode)
        return report

    def setup(self, stage: str | None = None) -> None:
        if stage in ("fit", None) and self.train_set is None:
            fail_or_warn(self.check(decode=False), self.hparams.on_bad_sample)
            chosen = ", ".join(f"{k} {v}" for k, v in asdict(self.augment).items() if v is not None and k != "pipeline")
            rank_zero_info(f"{self.hparams.task} augmentation, {self.augment.pipeline!r} pipeline: {chosen}")
            self.train_set = self._dataset(self.hparams.train_split, self.augment)
        if stage in ("fit", "validate", None) and self.val_set is None:
            self.val_set = self._dataset(self.hparams.val_split, None)

    def _loader(self, dataset, batch_size: int, shuffle: bool) -> DataLoader:
        hp = self.hparams
        return make_loader(dataset, batch_size, shuffle, hp.num_workers, hp.pin_memory, hp.persistent_workers)

    def train_dataloader(self) -> DataLoader:
        return self._loader(self.train_set, self.hparams.batch_size, shuffle=True)

    def val_dataloader(self) -> DataLoader:
        return self._loader(self.val_set, self.hparams.val_batch_size or self.hparams.batch_size, shuffle=False)
