"""One image + its dense targets -> one training or validation sample (see ``dense.files`` for the layout)."""

from __future__ import annotations

from typing import Literal

import numpy as np
import torch
from torch.utils.data import Dataset

from datamodules.dense.augment import DenseAugment, resolve_augment, validation_fit
from datamodules.dense.files import DenseSample, DenseSamples, as_samples
from datamodules.dense.filters import DenseFilter
from datamodules.dense.geometry import CANONICAL_FOCAL, MASK
from datamodules.dense.readers import chw
from datamodules.dense.target_spec import TargetSpec
from datamodules.dense.transforms import DenseTransform
from datamodules.boundary.images import read_image
from datamodules.loaders import FilteredSample, is_padding, replace_bad_samples, sample_rng
from datamodules.shards.index import ShardFiles


def load_sample(sample: DenseSample, spec: TargetSpec, num_classes: int, image: np.ndarray | None = None) -> dict:
    """Read and check the image and the targets (of the task of ``spec``) of one sample (numpy dict, see
    ``dense.geometry``); ``image``: the sample's image already read (several tasks' targets of one image)."""
    image = read_image(sample.image) if image is None else image
    return {"image": image, **spec.load(sample.files, image.shape[:2], num_classes)}


def relabel(sample: dict, spec: TargetSpec, table: np.ndarray | None) -> dict:
    """The class-id maps of ``sample`` (its spec's ``MapRule`` with ``classes``) through ``table`` (the label files'
    ids -> the class set's, ``classes.class_set.ClassSet.label_table``); as is without one."""
    if table is None:
        return sample
    return {**sample, **{kind: table[sample[kind]] for kind, rule in spec.maps.items() if rule.classes
                         and sample.get(kind) is not None}}


def to_item(sample: dict, spec: TargetSpec, canonical_focal: float = CANONICAL_FOCAL) -> dict:
    """Transformed numpy sample -> tensors of the dataset item (the image and the targets of the task of ``spec``)."""
    return {"image": chw(sample["image"]), **spec.to_item(sample, canonical_focal)}


class DenseDataset(Dataset):
    """Dense samples of the task of ``spec`` (its ``TargetSpec``) resized / augmented to ``input_size`` (H, W).

    Items: ``image`` uint8 (3, H, W), ``name`` and the task's target tensors (its ``TargetSpec.to_item``: the
    docstring of its ``sapiens2_ft/tasks/<task>/targets.py``).

    ``augment`` (unset fields: the task's defaults, see ``dense.augment``) makes it a training set; without it
    images are resized by ``fit`` (default: the one matching the task's training pipeline). ``filter``: samples
    it leaves out are replaced by the next one and counted (``filtered_samples``); by default training sets
    are filtered with the upstream checks, validation sets are not.
    ``labels``: (classes of the label files, their ids -> the set's ids), when the files are written in other classes.
    ``on_bad_sample="skip"``: a sample raising DataError is warned about and replaced by the next one;
    the item counts the replaced ones (``bad_samples_replaced``). ``files``: where each sample's image
    (``image``) and target files (by kind) lie in the shards (``datamodules.shards``; None: read the files).
    """

    def __init__(self, samples: DenseSamples | list[DenseSample], spec: TargetSpec, input_size: tuple[int, int],
                 num_classes: int = 29, flip_classes=None, augment: DenseAugment | dict | None = None,
                 on_bad_sample: Literal["error", "skip"] = "error", canonical_focal: float = CANONICAL_FOCAL,
                 filter: DenseFilter | None = None, fit: str | None = None,
                 files: dict[str, ShardFiles] | None = None, labels: tuple[int, np.ndarray | None] | None = None):
        self.samples = as_samples(samples)
        self.files = files
        self.spec = spec
        self.num_classes = num_classes
        # The label files' classes: their count (checked on reading) and the table to the set's ids (None: the same)
        self.label_count, self.class_table = labels or (num_classes, None)
        self.augment = resolve_augment(augment, spec) if augment is not None else None
        fit = fit or validation_fit(self.augment, spec)
        self.transform = DenseTransform(input_size, self.augment, flip_classes, num_classes, fit, spec.maps)
        self.filter = filter if filter is not None else (DenseFilter() if self.augment is not None else None)
        self.on_bad_sample = on_bad_sample
        self.canonical_focal = canonical_focal
        self._rng: np.random.Generator | None = None

    def __len__(self) -> int:
        return len(self.samples)

    def groups(self, epoch_seed: int) -> np.ndarray | None:
        """The shard of each sample (read in blocks by the training sampler); None when read from files."""
        return None if self.files is None else self.files["image"].shard

    def sample(self, index: int) -> DenseSample:
        """Sample ``index`` with its files' paths, or with their bytes when it is read from the shards."""
        sample = self.samples[index]
        if self.files is None:
            return sample
        return DenseSample(sample.name, self.files["image"].member(index, str(sample.image)),
                           {kind: self.files[kind].member(index, str(path)) for kind, path in sample.files.items()})

    def rng(self) -> np.random.Generator:
        """Fallback for plain integer keys: one generator per worker, seeded from torch. The training
        sampler gives each sample its own (``loaders.sample_rng``)."""
        if self._rng is None:
            self._rng = np.random.default_rng(torch.initial_seed())
        return self._rng

    def item(self, index: int, rng: np.random.Generator | None = None) -> dict:
        sample = self.sample(index)
        data = relabel(load_sample(sample, self.spec, self.label_count), self.spec, self.class_table)
        data = self.transform(data, rng)
        item = to_item(data, self.spec, self.canonical_focal)
        left_out = (self.filter.reason(item, MASK in sample.files, self.spec.checks) if self.filter is not None
                    else None)
        if left_out is not None:
            raise FilteredSample(sample.name, *left_out)
        return {**item, "name": sample.name}

    def __getitem__(self, key) -> dict:
        """``key``: an index, ``(index, epoch_seed)`` from the training sampler, or a validation
        :class:`~datamodules.loaders.PaddingKey` (the item says ``padding: True``; metrics skip it)."""
        index, rng = sample_rng(key)
        if rng is None and self.augment is not None:
            rng = self.rng()
        item = replace_bad_samples(lambda i: self.item(i, rng if self.augment is not None else None), index,
                                   len(self), self.on_bad_sample)
        return {**item, "padding": is_padding(key)}
