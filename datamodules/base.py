"""What every DataModule shares: the dataset folder, the input size, the loaders, the bad-sample policy and
the synthetic demo data. The task data modules declare only their own arguments and pass the rest on."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import lightning as L
from lightning.pytorch.utilities import rank_zero_info
from torch.utils.data import DataLoader, Dataset

from datamodules.errors import DataError
from datamodules.hparams import as_dataclass, plain_hparams
from datamodules.keypoints.metainfo import KeypointMetainfo
from datamodules.loaders import TrainPosition, make_loader
from datamodules.mixing import MixedDataset, SourceCount, source_names
from datamodules.shards.index import ShardIndex
from datamodules.shards.store import ShardStore
from datamodules.shards.writer import Part
from datamodules.synthetic_data import SyntheticData, render_if_missing
from datamodules.unlabeled import Fit, UnlabeledImages, WithUnlabeled, list_unlabeled


class SampleDataModule(L.LightningDataModule):
    """Base of the data modules (``data.*`` keys common to every task).

    Args:
        root: Dataset folder; the other paths (annotation files, split folders) are relative to it.
        input_size: Network input (H, W) (pose: the crop size, whose aspect ratio the crop boxes follow).
        batch_size: Samples per device per step.
        val_batch_size: Validation batch size (default: ``batch_size``).
        num_workers: DataLoader worker processes.
        pin_memory: Pin host memory for faster host-to-GPU copies.
        persistent_workers: Keep workers alive between epochs.
        on_bad_sample: ``error`` stops at the first bad sample or record; ``skip`` counts and drops it.
        synthetic: When set, render the synthetic demo dataset into ``root`` if it is missing.
        shards: Train and validate from the shards in this folder or at this URL (``https://``, ``http://``,
            ``s3://`` with the aws tool, ``gs://`` with gsutil; ``{}`` in it stands for the file name; no other
            scheme, no shell), written by ``python -m sapiens2_ft.write_shards``; the dataset paths are then not
            read. Each process reads its own run of shards, a shard at a time.
        shard_cache: Local folder of the shards downloaded from a URL, made private (default: ``shards/`` of the
            user's cache, ``$SAPIENS2_FT_CACHE`` or ``~/.cache/sapiens2_ft``).
        shard_cache_gb: Most gigabytes of downloaded shards kept; the least recently used are deleted.
        unlabeled: A folder of images nobody labelled (its symbolic links are not followed), for training with a
            teacher (``model.distill.teacher``): each training sample brings one of them, fitted to the input as
            the task's validation is (pose: the whole image as the person box), flipped at random; the teacher's
            outputs are its only target (``datamodules.unlabeled``).
    """

    hparams_ignore: tuple[str, ...] = ()  # arguments left out of the hyper-parameters
    # The label set its samples carry, where it has one (what the data sheet draws): a keypoint set, class names.
    metainfo: KeypointMetainfo | None = None
    class_names: list[str] | None = None

    def __init__(
        self,
        root: str = "data/synthetic",
        input_size: tuple[int, int] = (256, 192),
        batch_size: int = 16,
        val_batch_size: int | None = None,
        num_workers: int = 2,
        pin_memory: bool = True,
        persistent_workers: bool = True,
        on_bad_sample: Literal["error", "skip"] = "error",
        synthetic: SyntheticData | None = None,
        shards: str | None = None,
        shard_cache: str | None = None,
        shard_cache_gb: float = 50.0,
        unlabeled: str | None = None,
    ):
        super().__init__()
        self.save_hyperparameters(ignore=list(self.hparams_ignore))  # the subclass's arguments too
        plain_hparams(self)  # checkpoints stay loadable with weights_only=True
        self.root = Path(root)
        self.synthetic = as_dataclass(SyntheticData, synthetic)
        self.store = ShardStore(shards, shard_cache, shard_cache_gb) if shards else None
        self._shard_index: ShardIndex | None = None
        self.skipped: dict[str, dict[str, int]] = {}  # split -> reason -> samples left out when listing
        self.train_counts: list[SourceCount] = []  # the training datasets of a ``data.train`` mix
        self._train_start: TrainPosition | None = None
        self._unlabeled: UnlabeledImages | None = None

    def prepare_data(self) -> None:
        if self.store is None:
            render_if_missing(self.root, self.synthetic)

    def shard_index(self, kind: str) -> ShardIndex:
        """The index of ``data.shards`` (read once), which must hold ``kind`` samples (``pose`` or ``dense``)."""
        if self._shard_index is None:
            self._shard_index = ShardIndex(self.store)
        if self._shard_index.kind != kind:
            raise DataError(f"data.shards {self.store.location} holds {self._shard_index.kind} samples, this task "
                            f"reads {kind} samples")
        return self._shard_index

    @staticmethod
    def source_names(sources) -> list[str]:
        """The names of ``data.train`` entries (``name``, else the root folder's name, made unique)."""
        return source_names([s.name for s in sources], [s.root for s in sources])

    def shard_parts(self, split: str) -> list[Dataset]:
        """The datasets of ``split`` in ``data.shards`` (a training mix: one per dataset); by the task's data module."""
        raise NotImplementedError(f"{type(self).__name__} does not read shards")

    def setup_from_shards(self, kind: str, train: bool, val: bool) -> None:
        """``train_set`` and ``val_set`` from ``data.shards`` (a training mix as written, with its repeats)."""
        if train:
            parts, listed = self.shard_parts("train"), self.shard_index(kind).parts("train")
            self.train_set = parts[0] if len(parts) == 1 else self.mix_named(
                parts, [p["repeat"] for p in listed], [p["name"] for p in listed])
        if val:
            self.val_set = self.shard_parts("val")[0]
        for split, dataset in (("train", self.train_set if train else None), ("val", self.val_set if val else None)):
            if dataset is not None:  # where the samples come from, said as the folders' counts are
                rank_zero_info(f"{split}: {len(dataset)} samples from the shards of {self.store.location} (data.shards)")

    def written_parts(self) -> dict[str, list[Part]]:
        """The training datasets (one part each, with their repeats) and the validation set, after
        ``setup("fit")``: what ``write_shards`` writes."""
        train = self.train_set.parts if isinstance(self.train_set, MixedDataset) else [self.train_set]
        names = [c.name for c in self.train_counts] or ["train"]
        repeats = [c.repeat for c in self.train_counts] or [1.0]
        return {"train": [Part(n, r, d) for n, r, d in zip(names, repeats, train)],
                "val": [Part("val", 1.0, self.val_set)]}

    def mix(self, parts: list[Dataset], sources) -> MixedDataset:
        """The training datasets of ``data.train`` as one, each drawn its ``repeat`` times per epoch."""
        return self.mix_named(parts, [s.repeat for s in sources], self.source_names(sources))

    def mix_named(self, parts: list[Dataset], repeats: list[float], names: list[str]) -> MixedDataset:
        """``parts`` as one dataset, each drawn its repeat times per epoch, logged by name."""
        mixed = MixedDataset(parts, repeats, names)
        self.train_counts = mixed.counts
        for count in mixed.counts:
            rank_zero_info(f"train mix: {count.describe()}")
        return mixed

    def start_training_at(self, position: TrainPosition) -> None:
        """The next training loader built starts at ``position`` (a resumed run); later ones at their epoch's start."""
        self._train_start = position

    def unlabeled_fit(self) -> Fit:
        """How an unlabelled image becomes a network input (image (H, W) -> 2x3 matrix); by the task's data module."""
        raise NotImplementedError(f"{type(self).__name__} does not read unlabelled images")

    def unlabeled_images(self) -> UnlabeledImages | None:
        """The images of ``data.unlabeled`` (listed once; None when unset)."""
        if self.hparams.unlabeled and self._unlabeled is None:
            paths = list_unlabeled(self.hparams.unlabeled)
            rank_zero_info(f"unlabeled: {len(paths)} images from {self.hparams.unlabeled} (data.unlabeled)")
            self._unlabeled = UnlabeledImages(paths, self.hparams.input_size, self.unlabeled_fit())
        return self._unlabeled

    def loader(self, dataset: Dataset, train: bool) -> DataLoader:
        """The training (shuffled, ``batch_size``) or validation (``val_batch_size``) loader of ``dataset``."""
        hp = self.hparams
        batch_size = hp.batch_size if train else hp.val_batch_size or hp.batch_size
        start = None
        if train:
            start, self._train_start = self._train_start, None
            unlabeled = self.unlabeled_images()
            dataset = WithUnlabeled(dataset, unlabeled) if unlabeled is not None else dataset
        return make_loader(dataset, batch_size, train, hp.num_workers, hp.pin_memory, hp.persistent_workers,
                           start=start, groups=dataset.groups if self.store is not None else None)
