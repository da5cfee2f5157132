"""COCO-format keypoint data for top-down pose fine-tuning.

Layout (every path relative to ``root``; the defaults are the synthetic demo data)::

    root/annotations/train.json   root/train/images/...
    root/annotations/val.json     root/val/images/...

COCO 2017 is ``root=data/coco`` with ``train_ann=annotations/person_keypoints_train2017.json``,
``train_images=train2017`` and the same for val (see ``configs/pose_coco.yaml``). Several training datasets
(``data.train``: a list of :class:`PoseSource`) are mixed with a repeat each (``datamodules.mixing``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader

from datamodules.base import SampleDataModule
from datamodules.coco_index import CocoIndex, CocoSource, coco_index, ensure_index
from datamodules.coco_keypoints import load_detections
from datamodules.data_check import DataReport, check_coco, fail_or_warn
from datamodules.errors import DataError
from datamodules.hparams import as_dataclass, as_dataclasses
from datamodules.index_cache import IndexCache
from datamodules.keypoints.metainfo import load_metainfo
from datamodules.mixing import MixedDataset
from datamodules.pose_dataset import TopdownPoseDataset
from datamodules.shards.index import PERSON_CROPS
from datamodules.shards.writer import Part

VAL_JSON = "val.json"  # the validation json's copy beside the shards
from datamodules.transforms.topdown import TopdownAugment
from datamodules.unlabeled import Fit, fit_to, whole_image_matrix


@dataclass(frozen=True)
class PoseSource:
    """One training dataset of a ``data.train`` mix.

    Args:
        root: Its dataset folder; ``ann`` and ``images`` are relative to it.
        ann: COCO keypoints json.
        images: Folder the ``file_name`` entries are relative to.
        keypoints: Its keypoint set (default: the run's ``data.keypoints``), mapped onto the run's set by
            keypoint name; run keypoints it lacks train with weight 0.
        repeat: Times each sample is drawn per epoch (a fraction: a fresh random subset every epoch).
        name: Its name in the logs, the summary and the dashboard (default: the root folder's name).
    """

    root: str
    ann: str = "annotations/train.json"
    images: str = "train/images"
    keypoints: str | None = None
    repeat: float = 1.0
    name: str | None = None


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
        train: Several training datasets, each with its own root, paths, keypoint set and repeat; replaces
            ``train_ann`` / ``train_images`` (validation stays ``root`` / ``val_ann``).
        index_cache: Cache each json's checked instance index, so that later starts (and the other processes
            of a run) read it in a second instead of parsing and checking the json; rebuilt when the json or an
            option it depends on changes.
        cache_dir: Folder of those caches, made private (default: ``index/`` of the user's cache,
            ``$SAPIENS2_FT_CACHE`` or ``~/.cache/sapiens2_ft``; nothing is written into the dataset folder).
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
        train: list[PoseSource] | None = None,
        index_cache: bool = True,
        cache_dir: str | None = None,
        **kwargs,
    ):
        super().__init__(**kwargs)
        self.cache = IndexCache(cache_dir) if index_cache else None
        self.augment = as_dataclass(TopdownAugment, augment)
        self.metainfo = load_metainfo(keypoints)
        self.sources = as_dataclasses(PoseSource, train)
        if self.sources is not None and not self.sources:
            raise DataError("data.train: give at least one dataset, or leave it unset for train_ann/train_images")
        self.train_set: TopdownPoseDataset | MixedDataset | None = None
        self.val_set: TopdownPoseDataset | None = None

    @property
    def val_annotation_file(self) -> Path:
        """The validation json (the ground truth of OKS AP); with ``data.shards``, the copy beside them."""
        if self.store is not None:
            return self.store.path(VAL_JSON)
        return self.root / self.hparams.val_ann

    def _report(self, split: str, count: int, skipped) -> None:
        self.skipped[split] = dict(skipped)
        detail = ", ".join(f"{n} {why}" for why, n in skipped.items()) or "none"
        rank_zero_info(f"{split}: {count} person instances (skipped: {detail})")

    def train_sources(self) -> list[tuple[str, Path, Path, str]]:
        """(split name, annotation file, image folder, keypoint set) of every training dataset."""
        hp = self.hparams
        if self.sources is None:
            return [("train", self.root / hp.train_ann, self.root / hp.train_images, hp.keypoints)]
        return [(f"train/{name}", Path(s.root) / s.ann, Path(s.root) / s.images, s.keypoints or hp.keypoints)
                for name, s in zip(self.source_names(self.sources), self.sources)]

    def check(self, decode: bool = True) -> DataReport:
        """Every problem of the train and val annotations (and, with ``decode``, of every image file)."""
        hp, report = self.hparams, DataReport()
        crop = (hp.box_padding, hp.input_size[1] / hp.input_size[0])
        for split, ann, images, keypoints in self.train_sources():
            check_coco(ann, images, load_metainfo(keypoints), report, split, decode, crop)
        check_coco(self.val_annotation_file, self.root / hp.val_images, self.metainfo, report, "val", decode, crop)
        return report

    def coco_sources(self, train: bool, val: bool) -> list[tuple[str, CocoSource]]:
        """(split name, what its index is built from) of the training jsons (``train``) and the validation one."""
        hp = self.hparams
        crop = (hp.box_padding, hp.input_size[1] / hp.input_size[0])
        out = [(split, CocoSource(ann, images, load_metainfo(keypoints), self.metainfo, hp.min_keypoints,
                                  hp.on_bad_sample, crop)) for split, ann, images, keypoints in self.train_sources()]
        val_source = CocoSource(self.val_annotation_file, self.root / hp.val_images, self.metainfo, self.metainfo, 1,
                                hp.on_bad_sample, crop, leave_out_bad=False)
        return (out if train else []) + ([("val", val_source)] if val else [])

    def prepare_data(self) -> None:
        """Builds the missing index caches once per node (Lightning runs this on each node's first process while
        the others wait; ``setup`` then reads them). A json whose check fails is left to ``setup`` to report."""
        super().prepare_data()
        if self.cache is None or self.store is not None:
            return
        fn = getattr(getattr(getattr(self, "trainer", None), "state", None), "fn", None)
        train = fn is None or fn == "fit"
        for _, source in self.coco_sources(train, val=True):
            ensure_index(source, self.cache)

    def _train_set(self, split: str, source: CocoSource, index: CocoIndex) -> TopdownPoseDataset:
        """One training dataset, its keypoints mapped onto the run's set by name."""
        hp, names = self.hparams, source.keypoints.keypoint_names
        if source.keypoints.name != self.metainfo.name or names != self.metainfo.keypoint_names:
            missing = [n for n in self.metainfo.keypoint_names if n not in names]
            unused = [n for n in names if n not in self.metainfo.keypoint_names]
            rank_zero_info(f"{split}: keypoint set '{source.keypoints.name}' mapped onto '{self.metainfo.name}' by "
                           f"name; missing (weight 0): {missing or 'none'}; not used: {unused or 'none'}")
        if not len(index.instances):
            raise DataError(f"{source.ann_file}: no usable person instances (skipped: {dict(index.skipped)})")
        self._report(split, len(index.instances), index.skipped)
        return TopdownPoseDataset(index.instances, self.metainfo, hp.input_size, self.augment, hp.box_padding,
                                  hp.on_bad_sample)

    def shard_parts(self, split: str) -> list[TopdownPoseDataset]:
        """The datasets of ``split`` in ``data.shards`` (a training mix: one per dataset)."""
        hp, index = self.hparams, self.shard_index(PERSON_CROPS)
        if index.meta["keypoints"] != list(self.metainfo.keypoint_names):
            raise DataError(f"data.shards {self.store.location}: written for the keypoints {index.meta['keypoints']}, "
                            f"the run's set '{self.metainfo.name}' has {list(self.metainfo.keypoint_names)}")
        augment = self.augment if split == "train" else None
        parts, listed = [], index.parts(split)
        for part in listed:
            instances, files = index.pose_part(part["key"])
            self._report(f"{split}/{part['name']}" if len(listed) > 1 else split, len(instances), {})
            parts.append(TopdownPoseDataset(instances, self.metainfo, hp.input_size, augment, hp.box_padding,
                                            hp.on_bad_sample, image_files=files))
        return parts

    def setup(self, stage: str | None = None) -> None:
        """Lists and checks the jsons (from the index cache where it holds them), then builds the datasets."""
        hp = self.hparams
        train = stage in ("fit", None) and self.train_set is None
        val = stage in ("fit", "validate", None) and self.val_set is None
        if not (train or val):
            return
        if self.store is not None:
            self.setup_from_shards(PERSON_CROPS, train, val)
            return
        sources = self.coco_sources(train, val)
        indexes = [coco_index(source, self.cache) for _, source in sources]
        report = DataReport()
        for (split, _), index in zip(sources, indexes):
            index.add_to(report, split)
        fail_or_warn(report, hp.on_bad_sample)
        unusable = [source.ann_file for (_, source), index in zip(sources, indexes) if index.instances is None]
        if unusable:
            raise DataError(f"{unusable[0]}: unusable annotation file:\n" + report.format())
        if train:
            parts = [self._train_set(split, source, index)
                     for (split, source), index in zip(sources, indexes) if split != "val"]
            self.train_set = parts[0] if self.sources is None else self.mix(parts, self.sources)
        if val:
            if hp.val_detections:
                instances, skipped = load_detections(self.root / hp.val_detections, self.val_annotation_file,
                                                     self.root / hp.val_images, self.metainfo, hp.det_score_threshold)
            else:
                instances, skipped = indexes[-1].instances, indexes[-1].skipped
            self._report("val", len(instances), skipped)
            self.val_set = TopdownPoseDataset(instances, self.metainfo, hp.input_size, None, hp.box_padding,
                                              hp.on_bad_sample)

    def shard_splits(self) -> tuple[dict[str, list[Part]], dict[str, Path], dict]:
        """What ``write_shards`` writes of this data (after ``setup("fit")``): the datasets, the validation json
        beside them and the keypoint names."""
        return self.written_parts(), {VAL_JSON: self.val_annotation_file}, {
            "keypoints": list(self.metainfo.keypoint_names)}

    def unlabeled_fit(self) -> Fit:
        """The whole image as the person box (one person per unlabelled image)."""
        return fit_to(whole_image_matrix, self.hparams.input_size)

    def train_dataloader(self) -> DataLoader:
        return self.loader(self.train_set, train=True)

    def val_dataloader(self) -> DataLoader:
        return self.loader(self.val_set, train=False)
