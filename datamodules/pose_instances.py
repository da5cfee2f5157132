"""Person instances (one top-down sample each) as numpy columns: ``PoseInstances``, read as ``PoseInstance``s.

One array per field, the image paths in a ``StringTable`` (each image once), so that a COCO-size list costs
tens of MiB in the main process and nothing per DataLoader worker (``datamodules.columns``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import numpy as np

from datamodules.columns import StringTable, frozen


@dataclass(frozen=True)
class PoseInstance:
    image_path: str
    image_id: int
    annotation_id: int  # -1 for detections
    bbox: tuple[float, float, float, float]  # x, y, w, h in image pixels
    keypoints: np.ndarray  # (K, 2) float32
    visibility: np.ndarray  # (K,) float32, 0/1/2 as in COCO
    box_score: float = 1.0


COLUMNS = ("image_index", "image_id", "annotation_id", "bbox", "keypoints", "visibility", "box_score")


class PoseInstances:
    """``N`` instances of ``K`` keypoints: ``image_index`` (N,) into ``images`` (paths), ``image_id`` and
    ``annotation_id`` (N,) int64, ``bbox`` (N, 4) float64, ``keypoints`` (N, K, 2) float32, ``visibility``
    (N, K) float32, ``box_score`` (N,) float64. Indexing gives a ``PoseInstance`` (its arrays read-only views)."""

    def __init__(self, images: StringTable, image_index, image_id, annotation_id, bbox, keypoints, visibility,
                 box_score):
        self.images = images
        self.image_index = frozen(np.asarray(image_index, np.int64))
        self.image_id = frozen(np.asarray(image_id, np.int64))
        self.annotation_id = frozen(np.asarray(annotation_id, np.int64))
        self.bbox = frozen(np.asarray(bbox, np.float64).reshape(-1, 4))
        self.keypoints = frozen(np.asarray(keypoints, np.float32))
        self.visibility = frozen(np.asarray(visibility, np.float32))
        self.box_score = frozen(np.asarray(box_score, np.float64))
        n = len(self.image_index)
        if any(len(getattr(self, c)) != n for c in COLUMNS) or self.keypoints.shape[1:] != (
                self.visibility.shape[1], 2):
            raise ValueError("PoseInstances: every column needs one row per instance and (K, 2) keypoints")

    @classmethod
    def of(cls, instances: Sequence[PoseInstance], num_keypoints: int | None = None) -> "PoseInstances":
        """Columns of a list of ``PoseInstance`` (``num_keypoints``: K of an empty list)."""
        paths = list(dict.fromkeys(i.image_path for i in instances))
        where = {p: k for k, p in enumerate(paths)}
        k = len(instances[0].visibility) if instances else int(num_keypoints or 0)
        return cls(StringTable.of(paths), [where[i.image_path] for i in instances],
                   [i.image_id for i in instances], [i.annotation_id for i in instances],
                   np.asarray([i.bbox for i in instances], np.float64).reshape(-1, 4),
                   np.asarray([i.keypoints for i in instances], np.float32).reshape(-1, k, 2),
                   np.asarray([i.visibility for i in instances], np.float32).reshape(-1, k),
                   [i.box_score for i in instances])

    @property
    def num_keypoints(self) -> int:
        return self.visibility.shape[1]

    def __len__(self) -> int:
        return len(self.image_index)

    def __getitem__(self, index: int) -> PoseInstance:
        index = int(index)
        if not -len(self) <= index < len(self):
            raise IndexError(f"instance {index} out of range for {len(self)}")
        return PoseInstance(self.images[int(self.image_index[index])], int(self.image_id[index]),
                            int(self.annotation_id[index]), tuple(float(v) for v in self.bbox[index]),
                            self.keypoints[index], self.visibility[index], float(self.box_score[index]))

    def __iter__(self) -> Iterator[PoseInstance]:
        return (self[i] for i in range(len(self)))

    def image_path(self, index: int) -> str:
        return self.images[int(self.image_index[index])]

    def take(self, rows) -> "PoseInstances":
        """The instances at ``rows`` (indices or a boolean mask), in that order; the image table is shared."""
        return PoseInstances(self.images, *(getattr(self, c)[rows] for c in COLUMNS))

    def with_keypoints(self, keypoints: np.ndarray, visibility: np.ndarray) -> "PoseInstances":
        """The same instances with other keypoint columns (another keypoint set)."""
        columns = [getattr(self, c) for c in COLUMNS]
        columns[4:6] = keypoints, visibility
        return PoseInstances(self.images, *columns)

    def arrays(self) -> dict[str, np.ndarray]:
        """Every column by name (for ``np.savez``); ``from_arrays`` reads them back."""
        return {**self.images.arrays("images"), **{c: getattr(self, c) for c in COLUMNS}}

    @classmethod
    def from_arrays(cls, arrays) -> "PoseInstances":
        return cls(StringTable.from_arrays(arrays, "images"), *(arrays[c] for c in COLUMNS))


def as_instances(instances, num_keypoints: int) -> PoseInstances:
    """``PoseInstances`` as given, or the columns of a list of ``PoseInstance``."""
    return instances if isinstance(instances, PoseInstances) else PoseInstances.of(list(instances), num_keypoints)
