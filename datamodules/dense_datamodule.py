"""The DataModule of the whole-image tasks, given a task's target spec (the task layer hands it down:
``sapiens2_ft/tasks/dense_data.py``); file layout in ``dense.files``."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader

from datamodules.base import SampleDataModule
from datamodules.classes.class_set import label_names, resolve_class_set
from datamodules.data_check import DataReport, check_dense, fail_or_warn
from datamodules.dense.augment import DenseAugment, resolve_augment, validation_fit
from datamodules.dense_dataset import DenseDataset
from datamodules.dense.files import list_samples
from datamodules.dense.filters import DenseFilter
from datamodules.dense.geometry import flip_classes_from_names, letterbox_matrix, stretch_matrix
from datamodules.dense.pipelines import LETTERBOX
from datamodules.dense.target_spec import TargetSpec
from datamodules.errors import DataError
from datamodules.keypoints.metainfo import normalise_name
from datamodules.hparams import as_dataclass, as_dataclasses
from datamodules.mixing import MixedDataset
from datamodules.shards.index import WHOLE_IMAGES
from datamodules.shards.writer import Part
from datamodules.unlabeled import fit_to


@dataclass(frozen=True)
class DenseSource:
    """One training dataset of a ``data.train`` mix.

    Args:
        root: Its dataset folder (the layout of ``dense.files``).
        split: Its split folder under ``root``.
        repeat: Times each sample is drawn per epoch (a fraction: a fresh random subset every epoch).
        name: Its name in the logs, the summary and the dashboard (default: the root folder's name).
    """

    root: str
    split: str = "train"
    repeat: float = 1.0
    name: str | None = None


class DenseDataModule(SampleDataModule):
    """Per-pixel targets of one task from ``root/{split}/...`` folders matched by file stem (``root``,
    ``input_size``, loaders and ``synthetic``: see ``SampleDataModule``).

    Args:
        targets: The task's target spec (``dense.target_spec.TargetSpec``), handed down by the task layer.
        train_split: Training split folder (under ``root``).
        val_split: Validation split folder.
        num_classes: Segmentation classes (label values >= this, other than 255, are an error).
        class_names: Segmentation class names (default: the Sapiens2 29 classes when ``num_classes=29``).
        classes: Segmentation class set, instead of ``num_classes`` / ``class_names``: a built-in name
            (``sapiens2_29``, ``coarse``) or a YAML file of class names, merges of the 29 (``from``), new classes and
            colours (``docs/segmentation_classes.md``).
        label_classes: The classes the label files are written in, mapped onto the class set by name (a merge
            takes the labels of its sources): a built-in set's name, a class set YAML or a ``.txt`` of one name a
            line. Default: each dataset's ``classes.txt`` (what ``convert`` writes), else the set's own ids.
        flip_classes: Index map of classes swapped by a horizontal flip (default: Left_* <-> Right_*
            pairs of ``class_names``).
        augment: Training augmentation; unset fields take the task's upstream defaults (matting: the
            generic set). Validation resizes as the training pipeline's last step (seg: stretched to
            ``input_size``; the others: letterboxed).
        filter: Checks that leave a training sample out after augmentation (upstream's; counted in
            ``summary.json`` as ``filtered_samples``).
        train: Several training datasets, each with its own root, split and repeat; replaces ``train_split``
            (validation stays ``root`` / ``val_split``).
    """

    # The class set is the model's hyper-parameter (linked, resolved); from the CLI this one would stay
    # unresolved and Lightning refuses to merge differing values.
    # The target spec is code, not a hyper-parameter: its task's name is (``task``, from the CLI's config).
    hparams_ignore = ("class_names", "targets")

    def __init__(
        self,
        targets: TargetSpec,
        train_split: str = "train",
        val_split: str = "val",
        num_classes: int = 29,
        class_names: list[str] | None = None,
        classes: str | None = None,
        label_classes: str | None = None,
        flip_classes: list[int] | None = None,
        augment: DenseAugment = DenseAugment(),
        filter: DenseFilter = DenseFilter(),
        train: list[DenseSource] | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.targets = targets
        # hparams keep augment as given (unset = the task's default, resolved the same way on every load).
        self.augment = resolve_augment(augment, targets)
        self.filter = as_dataclass(DenseFilter, filter)
        self.class_set = resolve_class_set(num_classes, class_names, classes)
        self.class_names = class_names = list(self.class_set.names)
        self.num_classes = len(class_names)
        if flip_classes is None:
            flip_classes = flip_classes_from_names(class_names)
        self.flip_classes = list(flip_classes)
        self.sources = as_dataclasses(DenseSource, train)
        if self.sources is not None and not self.sources:
            raise DataError("data.train: give at least one dataset, or leave it unset for train_split")
        self.train_set: DenseDataset | MixedDataset | None = None
        self.val_set: DenseDataset | None = None

    def train_sources(self) -> list[tuple[str, Path, str]]:
        """(name in logs, root, split folder) of every training dataset."""
        if self.sources is None:
            return [(self.hparams.train_split, self.root, self.hparams.train_split)]
        return [(f"train/{name}", Path(s.root), s.split)
                for name, s in zip(self.source_names(self.sources), self.sources)]

    def label_map(self, root: Path | None) -> tuple[int, np.ndarray | None]:
        """(classes in the label files, their ids -> the set's ids, None when they are the set's) of the dataset at
        ``root``: ``data.label_classes``, else its ``classes.txt``, else the set's own ids (``root`` None: shards,
        whose folders are not read: ``data.label_classes`` or the set's ids)."""
        spec = self.hparams.label_classes
        if spec is None and root is not None and (Path(root) / "classes.txt").is_file():
            spec = Path(root) / "classes.txt"
        if spec is None:
            return self.num_classes, None
        names = label_names(spec)
        if [normalise_name(n) for n in names] == [normalise_name(n) for n in self.class_names]:
            return self.num_classes, None
        return len(names), self.class_set.label_table(names, f"{spec} (the labels of {root})")

    def _dataset(self, split: str, augment: DenseAugment | None, root: Path | None = None,
                 name: str | None = None) -> DenseDataset:
        hp, name = self.hparams, name or split
        samples, skipped = list_samples(self.root if root is None else root, split, self.targets, hp.on_bad_sample)
        self.skipped[name] = dict(skipped)
        detail = ", ".join(f"{n} {why}" for why, n in skipped.items()) or "none"
        rank_zero_info(f"{name}: {len(samples)} {self.targets.task} images (skipped: {detail})")
        filter = self.filter if augment is not None or self.filter.val else None
        return DenseDataset(samples, self.targets, hp.input_size, self.num_classes, self.flip_classes, augment,
                            hp.on_bad_sample, filter=filter, fit=validation_fit(self.augment, self.targets),
                            labels=self.label_map(self.root if root is None else root))

    def check(self, decode: bool = True) -> DataReport:
        """Every problem of the train and val splits: missing targets, and with ``decode`` every file's content."""
        hp, report = self.hparams, DataReport()
        for _, root, split in self.train_sources():
            check_dense(root, split, self.targets, self.label_map(root)[0], report, decode)
        check_dense(self.root, hp.val_split, self.targets, self.label_map(self.root)[0], report, decode)
        return report

    def shard_parts(self, split: str) -> list[DenseDataset]:
        """The datasets of ``split`` in ``data.shards`` (a training mix: one per dataset)."""
        hp, index, task = self.hparams, self.shard_index(WHOLE_IMAGES), self.targets.task
        if index.meta["task"] != task:
            raise DataError(f"data.shards {self.store.location}: written for task {index.meta['task']!r}, "
                            f"not {task!r}")
        augment = self.augment if split == "train" else None
        filter = self.filter if augment is not None or self.filter.val else None
        parts, listed = [], index.parts(split)
        for part in listed:
            samples, files = index.dense_part(part["key"])
            name = f"{split}/{part['name']}" if len(listed) > 1 else split
            rank_zero_info(f"{name}: {len(samples)} {task} images (from the shards)")
            parts.append(DenseDataset(samples, self.targets, hp.input_size, self.num_classes, self.flip_classes,
                                      augment, hp.on_bad_sample, filter=filter,
                                      fit=validation_fit(self.augment, self.targets), files=files,
                                      labels=self.label_map(None)))
        return parts

    def shard_splits(self) -> tuple[dict[str, list[Part]], dict[str, Path], dict]:
        """What ``write_shards`` writes of this data (after ``setup("fit")``): the datasets and the task."""
        return self.written_parts(), {}, {"task": self.targets.task}

    def setup(self, stage: str | None = None) -> None:
        if self.store is not None:
            self.setup_from_shards(WHOLE_IMAGES, stage in ("fit", None) and self.train_set is None,
                                   stage in ("fit", "validate", None) and self.val_set is None)
            return
        if stage in ("fit", None) and self.train_set is None:
            fail_or_warn(self.check(decode=False), self.hparams.on_bad_sample)
            chosen = ", ".join(f"{k} {v}" for k, v in asdict(self.augment).items() if v is not None and k != "pipeline")
            rank_zero_info(f"{self.targets.task} augmentation, {self.augment.pipeline!r} pipeline: {chosen}")
            parts = [self._dataset(split, self.augment, root, name) for name, root, split in self.train_sources()]
            self.train_set = parts[0] if self.sources is None else self.mix(parts, self.sources)
        if stage in ("fit", "validate", None) and self.val_set is None:
            self.val_set = self._dataset(self.hparams.val_split, None)

    def unlabeled_fit(self):
        """The validation resize of the task (letterboxed or stretched)."""
        fit = letterbox_matrix if validation_fit(self.augment, self.targets) == LETTERBOX else stretch_matrix
        return fit_to(fit, self.hparams.input_size)

    def train_dataloader(self) -> DataLoader:
        return self.loader(self.train_set, train=True)

    def val_dataloader(self) -> DataLoader:
        return self.loader(self.val_set, train=False)
