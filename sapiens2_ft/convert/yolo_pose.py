"""Ultralytics YOLO-pose: ``SRC/data.yaml`` and its image folders; a label file per image.

``data.yaml`` has ``path`` (the data set root; default: the YAML's folder), ``train`` / ``val`` / ``test`` (image
folders, ``.txt`` lists of image paths, or lists of either, relative to ``path``), ``kpt_shape: [K, 2 or 3]``,
``flip_idx`` and ``names`` (a list's ``./a.jpg`` lines are relative to the list, others to ``path``). The
labels of ``.../images/.../x.jpg`` are ``.../labels/.../x.txt``: one row per person, ``class cx cy w h`` then K
times ``x y`` (``x y v`` for 3), all normalised to the image size; v 0 (or x = y = 0 with 2 values) is a
keypoint not labelled. YOLO names no keypoints: they are the ``--keypoints`` set's,
in its order. Each split keeps its name unless ``--split`` / ``--val_fraction`` is given. Paths leading outside SRC
are problems (a ``path`` elsewhere: SRC is read instead); nothing outside SRC is read.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import yaml

from datamodules.boundary.files import read_text, read_yaml
from datamodules.boundary.folders import inside
from datamodules.data_check import DataReport
from datamodules.dense.files import IMAGE_SUFFIXES
from datamodules.errors import DataError
from datamodules.keypoints.metainfo import KeypointMetainfo
from sapiens2_ft.convert.budget import Tally, cost_of
from sapiens2_ft.convert.records import ConvertError, ImageRecord, Person, export_file, export_text

SPLITS = ("train", "val", "test")
YOLO_IMAGE_SUFFIXES = IMAGE_SUFFIXES + (".bmp", ".webp", ".tif", ".tiff")


def label_path(image: Path) -> Path:
    """The label file of an image: the last ``images`` folder of its path becomes ``labels``, the suffix ``.txt``."""
    parts = list(image.parts)
    k = len(parts) - 1 - parts[::-1].index("images") if "images" in parts else None
    if k is not None:
        parts[k] = "labels"
    return Path(*parts).with_suffix(".txt")


def _images(entry, root: Path, data_yaml: Path, key: str, problems: DataReport) -> list[tuple[Path, str]]:
    """(image, name relative to its folder) of one split; paths leading outside the export are problems."""
    src, images = data_yaml.parent, []
    for item in entry if isinstance(entry, list) else [entry]:
        path = inside(src, root / item, follow_links=True)  # an absolute item stays absolute
        if path is None:
            problems.add(data_yaml, key, key, f"a folder or list inside the export folder, got {item!r}; left out")
        elif path.is_dir():
            images += [(p, p.relative_to(path).as_posix()) for p in sorted(path.rglob("*"))
                       if p.suffix.lower() in YOLO_IMAGE_SUFFIXES and inside(src, p, follow_links=True)]
        elif path.suffix == ".txt" and path.is_file():
            lines = [line.strip() for line in export_text(src, path).splitlines() if line.strip()]
            for line in lines:
                image = inside(src, (path.parent if line.startswith("./") else root) / line, follow_links=True)
                if image is None:
                    problems.add(path, key, "image", f"a path inside the export folder, got {line!r}; left out")
                else:
                    images.append((image, image.name))
        else:
            raise ConvertError(f"{data_yaml}: '{key}': {path} is neither an image folder nor a .txt list")
    return images


def _people(label_file: Path, k: int, dims: int, record: str, problems: DataReport, metainfo) -> list[Person]:
    try:
        text = read_text(label_file, kind="label")
    except (OSError, DataError) as err:
        problems.add(label_file, record, "file", f"a readable text file ({err}); its people are left out")
        return []
    people = []
    for row, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        where = f"row {row}"
        try:
            values = [float(v) for v in line.split()]
        except ValueError:
            values = []
        if len(values) != 5 + k * dims or not all(math.isfinite(v) for v in values):
            problems.add(label_file, where, "values", f"{5 + k * dims} numbers (class cx cy w h + {k} keypoints x "
                         f"{dims}), got {len(line.split())}: {line[:60]!r}; the row is left out")
            continue
        cx, cy, w, h = values[1:5]
        person = Person(where, box=(cx - w / 2, cy - h / 2, cx + w / 2, cy + h / 2))
        for name, point in zip(metainfo.keypoint_names, np.reshape(values[5:], (k, dims))):
            x, y = point[:2]
            v = point[2] if dims == 3 else (0 if x == 0 and y == 0 else 2)
            if v not in (0, 1, 2):
                problems.add(label_file, where, "visibility", f"'{name}': 0, 1 or 2, got {v}; the keypoint is left out")
            elif v > 0:
                person.keypoints[name] = (float(x), float(y), int(v))
        people.append(person)
    return people


def read(src: Path, problems: DataReport, metainfo: KeypointMetainfo, tally: Tally | None = None
         ) -> list[ImageRecord]:
    data_yaml = next((src / n for n in ("data.yaml", "dataset.yaml") if (src / n).is_file()), None)
    if data_yaml is None:
        raise ConvertError(f"{src}: no data.yaml found (give the folder that holds the YOLO data set's data.yaml)")
    try:
        data = read_yaml(export_file(src, data_yaml))
    except yaml.YAMLError as err:
        raise ConvertError(f"{data_yaml}: not valid YAML ({err})") from err
    except DataError as err:
        raise ConvertError(str(err)) from None
    shape = data.get("kpt_shape") if isinstance(data, dict) else None
    if not (isinstance(shape, list) and len(shape) == 2 and shape[1] in (2, 3) and isinstance(shape[0], int)):
        raise ConvertError(f"{data_yaml}: 'kpt_shape' must be [number of keypoints, 2 or 3], got {shape!r}")
    k, dims = shape
    if k != metainfo.num_keypoints:
        raise ConvertError(f"{data_yaml}: kpt_shape has {k} keypoints, the keypoint set '{metainfo.name}' has "
                           f"{metainfo.num_keypoints}: YOLO names no keypoints, so --keypoints must give a set of "
                           f"{k} keypoints in the order of the label rows")
    flip = data.get("flip_idx")
    if isinstance(flip, list) and list(flip) != list(metainfo.flip_indices):
        names = metainfo.keypoint_names
        differ = [f"{names[i]}->{names[j] if 0 <= j < k else j} (set: {names[metainfo.flip_indices[i]]})"
                  for i, j in enumerate(flip[:k]) if j != metainfo.flip_indices[i]]
        problems.add(data_yaml, "-", "flip_idx", f"differs from the flip pairs of '{metainfo.name}' at "
                     f"{', '.join(differ[:8]) or 'its length'}; check the keypoint order", fatal=False)
    root = inside(data_yaml.parent, data_yaml.parent / (data.get("path") or "."), follow_links=True)
    if root is None:
        problems.add(data_yaml, "-", "path", f"a folder inside the export folder, got {data.get('path')!r}; the "
                     "folder of data.yaml is read instead", fatal=False)
    if root is None or not root.is_dir():
        root = data_yaml.parent
    tally = tally or Tally()
    tally.files([data_yaml])
    records = []
    for split in (s for s in SPLITS if data.get(s)):
        for image, name in _images(data[split], root, data_yaml, split, problems):
            record = ImageRecord(data_yaml, name, image=image, split=split, normalised=True, record=f"{split} {name}")
            labels = label_path(image)
            if inside(src, labels, follow_links=True) and labels.is_file():
                tally.files([labels])
                record.people = _people(labels, k, dims, record.record, problems, metainfo)
                tally.add(labels, **cost_of([record]))
            records.append(record)
    if not records:
        raise ConvertError(f"{data_yaml}: no images in {', '.join(SPLITS)}")
    return records
