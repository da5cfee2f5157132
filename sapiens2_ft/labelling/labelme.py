"""LabelMe: one JSON file beside each image, as LabelMe writes them (``version``, ``flags``, ``shapes``, ``imagePath``,
``imageData``, ``imageHeight``, ``imageWidth``).

``OUT/KEY`` is a copy of the image and ``OUT/KEY_STEM.json`` its annotation (``imagePath`` the image's file name;
``imageData`` null: LabelMe reads the image beside it), so ``labelme OUT`` opens the folder with the pre-annotations
drawn. Pose: per person a ``rectangle`` labelled ``person`` and a ``point`` per keypoint labelled by its name, tied by
the person's ``group_id``; seg: a ``polygon`` per region labelled by its class (``outlines.py``), painted in file
order. Each shape's ``description`` holds the model and its score (``sapiens2-ft MODEL score 0.9132``).
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from datamodules.boundary.writes import copy_file, write_json
from sapiens2_ft.labelling.outlines import outlines
from sapiens2_ft.labelling.predictions import ImagePrediction, LabelSet

LABELME_VERSION = "5.5.0"  # the file layout of LabelMe 5 (shape "description" and "mask" keys)
PERSON_LABEL = "person"


def _shape(label: str, points: list, kind: str, group: int | None, description: str) -> dict:
    return {"label": label, "points": points, "group_id": group, "description": description, "shape_type": kind,
            "flags": {}, "mask": None}


def shapes(prediction: ImagePrediction, labels: LabelSet, min_score: float = 0.0) -> list[dict]:
    """The LabelMe shapes of one image's prediction (see the module docstring)."""
    about = f"sapiens2-ft {labels.model_version} score"
    found = []
    if prediction.people is not None:
        for i, person in enumerate(prediction.people):
            x, y, w, h = (float(v) for v in person["bbox"][:4])
            found.append(_shape(PERSON_LABEL, [[x, y], [x + w, y + h]], "rectangle", i,
                                f"{about} {person['score']:.4f}"))
            found += [_shape(name, [[float(px), float(py)]], "point", i, f"{about} {s:.4f}")
                      for name, (px, py), s in zip(labels.names, person["points"], person["scores"]) if s >= min_score]
        return found
    for o in outlines(prediction.classes, prediction.confidence):
        found.append(_shape(labels.names[o.class_id], o.points.tolist(), "polygon", None, f"{about} {o.score:.4f}"))
    return found


class LabelMeFiles:
    """The images and their LabelMe files in ``out`` (see the module docstring)."""

    name = "labelme"

    def __init__(self, out: Path, labels: LabelSet, min_score: float = 0.0, **_):
        self.out, self.labels, self.min_score, self.count = Path(out), labels, min_score, 0
        self.names: set[str] = set()

    def add(self, prediction: ImagePrediction) -> None:
        key = PurePosixPath(prediction.key)
        copy_file(prediction.path, self.out, key.as_posix())
        width, height = prediction.size
        name = key.with_suffix(".json").as_posix()
        if name.lower() in self.names:  # a.jpg and a.png in one folder: the second gets a.png.json
            name = f"{key.as_posix()}.json"
        self.names.add(name.lower())
        write_json(self.out, name,
                   {"version": LABELME_VERSION, "flags": {}, "shapes": shapes(prediction, self.labels, self.min_score),
                    "imagePath": key.name, "imageData": None, "imageHeight": height, "imageWidth": width}, indent=1)
        self.count += 1

    def close(self) -> str:
        return f"LabelMe: {self.count} images with their JSON files -> {self.out} (open it with: labelme {self.out})"
