"""Write datasets as WebDataset tar shards plus their index (``datamodules.shards.index``).

Every file a sample reads (a pose image, a dense image and its target files) goes into the shards byte for byte, so
a sample read from the shards is the one read from the files. One WebDataset sample per entry: key
``<part>_<entry>``, one member per file (pose: the image under its extension; dense: ``image.png``,
``labels.png``, ``normals.npy``...), so any WebDataset pipeline reads the shards too.
"""

from __future__ import annotations

import tarfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tqdm import tqdm

from datamodules.boundary.files import read_bytes
from datamodules.boundary.writes import copy_file, replacing, write_json
from datamodules.dense_dataset import DenseDataset
from datamodules.errors import DataError
from datamodules.pose_dataset import TopdownPoseDataset
from datamodules.shards.index import ARRAYS, FORMAT, INDEX, PERSON_CROPS, VERSION, WHOLE_IMAGES

PATTERN = "shard-%06d.tar"


@dataclass(frozen=True)
class Part:
    """One dataset of a split (a training mix has several): its name, repeat and samples."""

    name: str
    repeat: float
    dataset: TopdownPoseDataset | DenseDataset


def extension(path: str) -> str:
    suffix = Path(path).suffix.lower().lstrip(".")
    return suffix if suffix.isalnum() else "bin"


def entries(part: Part) -> list[dict[str, str]]:
    """The files of each entry of ``part``, by member name (pose: one per image; dense: one per sample)."""
    dataset = part.dataset
    if isinstance(dataset, TopdownPoseDataset):
        return [{extension(path): path} for path in dataset.instances.images]
    return [{f"image.{extension(str(s.image))}": str(s.image),
             **{f"{kind}.{extension(str(p))}": str(p) for kind, p in s.files.items()}} for s in dataset.samples]


def write_shards(out: Path, splits: dict[str, list[Part]], copies: dict[str, Path] | None = None,
                 meta: dict | None = None, shard_mb: float = 1024, shard_samples: int = 10_000) -> dict:
    """Write ``splits`` (split name -> parts) into ``out`` (created; must not hold shards already) in shards of at
    most ``shard_mb`` MiB and ``shard_samples`` samples; ``copies``: further files to keep beside the index (name ->
    source, such as the validation json); ``meta``: more index.json fields. Returns index.json."""
    import webdataset as wds

    out = Path(out)
    if (out / INDEX).exists() or any(out.glob("shard-*.tar")):
        raise DataError(f"{out} holds shards already: give an empty or new folder")
    out.mkdir(parents=True, exist_ok=True)
    kinds = {type(p.dataset) for parts in splits.values() for p in parts}
    if len(kinds) != 1:
        raise DataError(f"shards hold the samples of one kind of dataset, got {sorted(k.__name__ for k in kinds)}")
    pose = kinds == {TopdownPoseDataset}
    keys, files = {}, {}
    with wds.ShardWriter(str(out / PATTERN), maxcount=shard_samples, maxsize=int(shard_mb * 2**20), verbose=0,
                         encoder=False) as sink:
        for split, parts in splits.items():
            for part in parts:
                key = keys[id(part)] = f"p{len(keys)}"
                files[key] = entries(part)
                for n, members in enumerate(tqdm(files[key], desc=f"{split} {part.name}", unit="sample")):
                    try:
                        sample = {name: read_bytes(path) for name, path in members.items()}
                    except OSError as err:
                        raise DataError(f"cannot read {err.filename} ({err.strerror})") from err
                    sink.write({"__key__": f"{key}_{n:09d}", **sample})
    shards = sorted(p.name for p in out.glob("shard-*.tar"))
    where = {}
    for number, shard in enumerate(shards):
        with tarfile.open(out / shard) as tar:
            where.update({m.name: (number, m.offset_data, m.size) for m in tar.getmembers() if m.isfile()})
    arrays, part_meta = {}, {}
    for split, parts in splits.items():
        for part in parts:
            key = keys[id(part)]
            arrays.update(part_arrays(key, part, files[key], where, pose))
            part_meta[key] = {"entries": len(files[key]),
                              "kinds": [] if pose else list(part.dataset.samples.files)}
    with replacing(out, ARRAYS) as temporary:
        np.savez(temporary, **arrays)
    for name, source in (copies or {}).items():
        copy_file(source, out, name)
    index = {"format": FORMAT, "version": VERSION, "kind": PERSON_CROPS if pose else WHOLE_IMAGES, **(meta or {}),
             "splits": {split: [{"key": keys[id(p)], "name": p.name, "repeat": p.repeat} for p in parts]
                        for split, parts in splits.items()},
             "parts": part_meta, "shards": shards, "copies": sorted(copies or {}),
             "bytes": sum((out / s).stat().st_size for s in shards)}
    write_json(out, INDEX, index, indent=1)
    return index


def locations(key: str, members: list[str | None], where: dict) -> dict[str, np.ndarray]:
    """Shard, offset and size of each entry's member (``None``: no such file, size -1)."""
    rows = [where[f"{key}_{n:09d}.{m}"] if m is not None else (0, 0, -1) for n, m in enumerate(members)]
    table = np.asarray(rows, np.int64).reshape(-1, 3)
    return {"shard": table[:, 0], "offset": table[:, 1], "size": table[:, 2]}


def part_arrays(key: str, part: Part, files: list[dict[str, str]], where: dict, pose: bool) -> dict[str, np.ndarray]:
    """The columns of one part and where its files lie."""
    def at(prefix: str, members: list[str | None]) -> dict[str, np.ndarray]:
        return {f"{prefix}.{k}": v for k, v in locations(key, members, where).items()}

    if pose:
        instances = part.dataset.instances
        columns = {f"{key}.{name}": value for name, value in instances.arrays().items()
                   if not name.startswith("images_")}
        return {**columns, **instances.images.arrays(f"{key}.images"),
                **at(f"{key}.image_files", [next(iter(members)) for members in files])}
    samples = part.dataset.samples
    arrays = {**samples.names.arrays(f"{key}.names"), **samples.images.arrays(f"{key}.images")}
    for kind, column in samples.files.items():
        arrays.update(column.arrays(f"{key}.files.{kind}"))
    by_kind = {kind: [next((m for m in members if m.split(".")[0] == kind), None) for members in files]
               for kind in ["image", *samples.files]}
    for kind, members in by_kind.items():
        arrays.update(at(f"{key}.at.{kind}", members))
    return arrays


