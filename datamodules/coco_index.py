"""The parsed and checked index of one COCO keypoints json, built once and cached (``datamodules.index_cache``).

Building reads the json once, checks it as ``check_data`` does without decoding images (every image file looked
up once), and lists its person instances in the run's keypoint set. The cache key holds everything the result
depends on: the json's size, mtime and content hash, the image folder, the json's and the run's keypoint names,
``min_keypoints``, ``on_bad_sample``, the crop of the keypoint-coverage check (box padding, input W/H) and
whether the data check's bad records are left out. A cached index records which image files were present when it
was built; one removed later is a bad sample when read (``on_bad_sample``).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import numpy as np

from datamodules.coco_keypoints import load_instances, map_keypoints
from datamodules.columns import StringTable
from datamodules.data_check import DataReport, Problem, check_coco, read_coco_json
from datamodules.index_cache import IndexCache, fingerprint, from_text_array, text_array
from datamodules.keypoints.metainfo import KeypointMetainfo
from datamodules.pose_instances import COLUMNS, PoseInstances


@dataclass
class CocoIndex:
    """One json's instances (None when its check found fatal problems under ``on_bad_sample="error"``),
    its skip counts, the data check's problems and what it checked."""

    instances: PoseInstances | None
    skipped: Counter
    problems: list[Problem]
    checked: Counter

    def add_to(self, report: DataReport, split: str) -> None:
        """Its problems and counts into ``report`` (under ``split``)."""
        report.problems += self.problems
        for what, n in self.checked.items():
            report.count(split, what, n)

    def arrays(self, images_dir: Path) -> dict[str, np.ndarray]:
        """What the cache holds; image paths relative to ``images_dir`` (when all are under it), so that the index
        does not depend on the working folder."""
        prefix = f"{images_dir}/"
        relative = all(path.startswith(prefix) for path in self.instances.images)
        paths = [path[len(prefix):] for path in self.instances.images] if relative else list(self.instances.images)
        meta = {"skipped": self.skipped, "checked": self.checked, "relative": relative,
                "problems": [[p.file, p.record, p.field, p.expected, p.fatal] for p in self.problems]}
        return {**self.instances.arrays(), **StringTable.of(paths).arrays("images"), "meta": text_array(meta)}

    @classmethod
    def from_arrays(cls, arrays: dict, images_dir: Path) -> "CocoIndex | None":
        """The index saved by ``arrays``; None when an image path of it leads outside ``images_dir`` (a cache file
        that this code did not write: the json's paths are kept inside the folder, ``paths.inside``)."""
        meta = from_text_array(arrays["meta"])
        images = StringTable.from_arrays(arrays, "images", f"{images_dir}/" if meta["relative"] else "")
        if not meta["relative"] or leaves_folder(StringTable.from_arrays(arrays, "images")):
            return None
        instances = PoseInstances(images, *(arrays[c] for c in COLUMNS))
        return cls(instances, Counter(meta["skipped"]), [Problem(*p) for p in meta["problems"]],
                   Counter(meta["checked"]))


def leaves_folder(names: StringTable) -> bool:
    """Whether a relative path of ``names`` is absolute or climbs out with ``..`` (the bytes scanned at once)."""
    starts = names.offsets[:-1][np.diff(names.offsets) > 0]
    if (names.buffer[starts] == ord("/")).any():
        return True
    return b".." in names.buffer.tobytes() and any(".." in PurePosixPath(name).parts for name in names)


@dataclass(frozen=True)
class CocoSource:
    """What one json's index is built from: the json, its image folder and keypoint set, and the run's options
    (``crop``: box padding and input W/H of the keypoint-coverage check; ``leave_out_bad``: training leaves the
    data check's bad records out, validation reads every record)."""

    ann_file: Path
    images_dir: Path
    keypoints: KeypointMetainfo  # the json's set
    run_keypoints: KeypointMetainfo  # the run's set, onto which the instances are mapped by name
    min_keypoints: int
    on_bad_sample: str
    crop: tuple[float, float]
    leave_out_bad: bool = True

    def key(self) -> dict:
        return {"index": "coco keypoints", "json": fingerprint(self.ann_file),
                "images": str(self.images_dir.resolve()), "keypoints": list(self.keypoints.keypoint_names),
                "run_keypoints": list(self.run_keypoints.keypoint_names), "min_keypoints": self.min_keypoints,
                "on_bad_sample": self.on_bad_sample, "crop": list(self.crop), "leave_out_bad": self.leave_out_bad}


def build_index(source: CocoSource) -> CocoIndex:
    """Read, check and list one json (the json parsed once)."""
    report = DataReport()
    data = read_coco_json(source.ann_file, report)
    if data is not None:
        check_coco(source.ann_file, source.images_dir, source.keypoints, report, "-", False, source.crop, data)
    checked = report.checked.get("-", Counter())
    if data is None or (report.fatal and source.on_bad_sample != "skip"):
        return CocoIndex(None, Counter(), report.problems, checked)
    bad = report.bad_annotations.get(str(source.ann_file), set()) if source.leave_out_bad else set()
    instances, skipped = load_instances(source.ann_file, source.images_dir, source.keypoints, source.min_keypoints,
                                        source.on_bad_sample, bad, data)
    del data
    if source.keypoints.keypoint_names != source.run_keypoints.keypoint_names:
        instances, _, _ = map_keypoints(instances, source.keypoints, source.run_keypoints)
        kept = (instances.visibility > 0).sum(1) >= source.min_keypoints
        if not kept.all():
            skipped["too few keypoints of the run's set"] += int((~kept).sum())
        instances = instances.take(kept)
    return CocoIndex(instances, skipped, report.problems, checked)


def ensure_index(source: CocoSource, cache: IndexCache) -> None:
    """Build and save the index of ``source`` unless ``cache`` holds it (or the json is missing: ``setup`` says)."""
    if source.ann_file.is_file():
        key = source.key()
        if not cache.holds(cache.path(source.ann_file, key), key):
            coco_index(source, cache, key)


def coco_index(source: CocoSource, cache: IndexCache | None, key: dict | None = None) -> CocoIndex:
    """The index of ``source``: read from ``cache`` when it holds it, else built (and saved there when it passed
    its check). ``cache`` None: always built."""
    if cache is None or not source.ann_file.is_file():
        return build_index(source)
    key = source.key() if key is None else key
    path = cache.path(source.ann_file, key)
    stored = cache.load(path, key)
    index = CocoIndex.from_arrays(stored, source.images_dir) if stored is not None else None
    if index is not None:
        return index
    index = build_index(source)
    if index.instances is not None:
        cache.save(path, key, index.arrays(source.images_dir))
    return index
