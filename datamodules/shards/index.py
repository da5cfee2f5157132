"""A shard folder's index: ``index.json`` (what it holds: task kind, parts, shards) and ``index.npz`` (per part its
samples as columns, and where each of their files lies in the shards). Read back into the data modules' datasets."""

from __future__ import annotations

import re

import numpy as np

from datamodules.boundary.arrays import read_npz
from datamodules.boundary.files import StoredFile, read_json
from datamodules.columns import StringTable, frozen
from datamodules.dense.files import DenseSamples
from datamodules.errors import DataError, RefusedInput
from datamodules.pose_instances import COLUMNS, PoseInstances
from datamodules.shards.store import ShardStore

FORMAT, VERSION = "sapiens2_ft shards", 1
INDEX, ARRAYS = "index.json", "index.npz"
# The kinds of samples an index holds (its ``kind``): person crops of COCO keypoints, and whole images with per-pixel
# targets (a format value of index.json, which names the crops after the top-down pose data).
PERSON_CROPS, WHOLE_IMAGES = "pose", "dense"


class ShardFiles:
    """Where one file of each entry lies: ``shard`` (index into ``shards``), ``offset`` and ``size`` (-1: the entry
    has no such file), read through ``store``."""

    def __init__(self, store: ShardStore, shards: list[str], shard, offset, size):
        self.store, self.shards = store, shards
        self.shard, self.offset, self.size = (frozen(np.asarray(a, t)) for a, t in
                                              ((shard, np.int32), (offset, np.int64), (size, np.int64)))

    def member(self, entry: int, name: str) -> StoredFile | None:
        """The file of ``entry`` (named ``name`` in messages); None when it has none."""
        size = int(self.size[entry])
        if size < 0:
            return None
        return self.store.read(self.shards[int(self.shard[entry])], int(self.offset[entry]), size, name)

    def arrays(self, prefix: str) -> dict[str, np.ndarray]:
        return {f"{prefix}.shard": self.shard, f"{prefix}.offset": self.offset, f"{prefix}.size": self.size}

    @classmethod
    def from_arrays(cls, arrays, prefix: str, store: ShardStore, shards: list[str]) -> "ShardFiles":
        return cls(store, shards, *(arrays[f"{prefix}.{k}"] for k in ("shard", "offset", "size")))


class ShardIndex:
    """The index of the shard folder of ``store``: ``meta`` (index.json) and each part's columns."""

    def __init__(self, store: ShardStore):
        self.store = store
        meta_path = store.path(INDEX)
        try:
            self.meta = read_json(meta_path)
        except RefusedInput:
            raise
        except (OSError, ValueError) as err:
            raise DataError(f"{store.location}: {INDEX} is not a shard index ({err})") from err
        if not isinstance(self.meta, dict) or self.meta.get("format") != FORMAT or self.meta.get("version") != VERSION:
            raise DataError(f"{store.location}: {INDEX} is not a version-{VERSION} index of {FORMAT} "
                            f"(written by python -m sapiens2_ft.write_shards)")
        names = [*self.meta.get("shards", []), *self.meta.get("copies", [])]
        outside = [n for n in names if not (isinstance(n, str) and re.fullmatch(r"[\w.-]+", n) and n.strip("."))]
        if outside:
            raise DataError(f"{store.location}: {INDEX} names files outside its folder: {outside[:3]}")
        self.arrays = read_npz(store.path(ARRAYS))

    @property
    def kind(self) -> str:
        return self.meta["kind"]

    def parts(self, split: str) -> list[dict]:
        """The parts of ``split`` (``train``: one per dataset of a mix; ``val``: one), each ``{key, name, repeat}``."""
        if split not in self.meta["splits"]:
            raise DataError(f"{self.store.location}: the shards hold no {split!r} split "
                            f"(they hold {sorted(self.meta['splits'])})")
        return self.meta["splits"][split]

    def pose_part(self, key: str) -> tuple[PoseInstances, ShardFiles]:
        a = self.arrays
        images = StringTable.from_arrays(a, f"{key}.images")
        return (PoseInstances(images, *(a[f"{key}.{c}"] for c in COLUMNS)),
                ShardFiles.from_arrays(a, f"{key}.image_files", self.store, self.meta["shards"]))

    def dense_part(self, key: str) -> tuple[DenseSamples, dict[str, ShardFiles]]:
        a, kinds = self.arrays, self.meta["parts"][key]["kinds"]
        samples = DenseSamples(StringTable.from_arrays(a, f"{key}.names"), StringTable.from_arrays(a, f"{key}.images"),
                               {k: StringTable.from_arrays(a, f"{key}.files.{k}") for k in kinds})
        files = {k: ShardFiles.from_arrays(a, f"{key}.at.{k}", self.store, self.meta["shards"])
                 for k in ["image", *kinds]}
        return samples, files
