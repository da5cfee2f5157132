"""CVAT: pose as "CVAT for images 1.1" (skeletons), seg as "Segmentation mask 1.1", each with its images, as CVAT
exports them with "Save images": zip the folder and import it into a project ("Import dataset") or a task ("Upload
annotations").

Pose, ``OUT/annotations.xml`` + ``OUT/images/KEY``: per person a ``<skeleton label="person">`` whose ``<points>``
are its keypoints (``outside="1"``: scored below ``--min_score``, not labelled) and a ``<box label="person_box">``
with the same ``group_id``; shapes are ``source="auto"`` and carry a ``score`` attribute (the person's on the box and
skeleton, the keypoint's on each point). The labels are declared in ``<meta>`` as ``sapiens2-ft label-config --tool
cvat`` prints them for a new project.

Seg, the Pascal VOC layout: ``labelmap.txt`` (``name:r,g,b::`` per class, the background first; a comment names the
model), ``ImageSets/Segmentation/default.txt`` (the images' names without suffix), ``SegmentationClass/NAME.png``
(each class in its colour) and ``JPEGImages/NAME.ext``. Images in sub-folders are named ``a__b`` for ``a/b.jpg``.
A mask file has no place for scores.
"""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from datetime import datetime, timezone
from pathlib import Path, PurePosixPath

import numpy as np

from datamodules.boundary.writes import copy_file, write_image, write_text
from sapiens2_ft.labelling.predictions import ImagePrediction, LabelSet

SKELETON, BOX = "person", "person_box"
SCORE = "score"


def voc_colour(index: int) -> tuple[int, int, int]:
    """Pascal VOC's colour of class ``index`` (the bits of the index spread over r, g, b from the top bit down)."""
    r = g = b = 0
    for shift in range(7, -1, -1):
        r |= (index & 1) << shift
        g |= (index >> 1 & 1) << shift
        b |= (index >> 2 & 1) << shift
        index >>= 3
    return r, g, b


def _score_attribute() -> dict:
    return {"name": SCORE, "mutable": False, "input_type": "text", "default_value": "", "values": [""]}


def _node_positions(count: int) -> list[tuple[float, float]]:
    """Where the skeleton's nodes sit in CVAT's drawing area (100 x 100): rows of up to 6."""
    cols = min(6, count) or 1
    return [(10 + 80 * (k % cols) / max(cols - 1, 1), 10 + 80 * (k // cols) / max((count - 1) // cols, 1))
            for k in range(count)]


def skeleton_svg(labels: LabelSet) -> str:
    """The ``svg`` CVAT keeps for a skeleton label: its edges (``data-node-from`` / ``-to``) and nodes
    (``data-label-name``), numbered from 1."""
    at = _node_positions(len(labels.names))
    parts = [f'<line x1="{at[a][0]:.1f}" y1="{at[a][1]:.1f}" x2="{at[b][0]:.1f}" y2="{at[b][1]:.1f}" stroke="black" '
             f'data-type="edge" data-node-from="{a + 1}" stroke-width="0.5" data-node-to="{b + 1}"></line>'
             for a, b in labels.skeleton]
    parts += [f'<circle r="1.5" stroke="black" fill="#b3b3b3" cx="{x:.1f}" cy="{y:.1f}" stroke-width="0.1" '
              f'data-type="element node" data-element-id="{k + 1}" data-node-id="{k + 1}" '
              f'data-label-name="{_attr(name)}"></circle>' for k, (name, (x, y)) in enumerate(zip(labels.names, at))]
    return "".join(parts)


def _attr(text: str) -> str:
    return text.replace("&", "&amp;").replace('"', "&quot;").replace("<", "&lt;").replace(">", "&gt;")


def project_labels(labels: LabelSet) -> list[dict]:
    """The labels of a CVAT project for these pre-annotations (its "Raw" label editor takes this JSON)."""
    if labels.kind == "keypoint":
        points = [{"name": name, "type": "points", "attributes": [_score_attribute()]} for name in labels.names]
        return [{"name": SKELETON, "type": "skeleton", "attributes": [_score_attribute()], "sublabels": points,
                 "svg": skeleton_svg(labels)},
                {"name": BOX, "type": "rectangle", "attributes": [_score_attribute()]}]
    return [{"name": name, "type": "mask", "color": "#%02x%02x%02x" % voc_colour(k), "attributes": []}
            for k, name in enumerate(labels.names)]


def _meta(root: ET.Element, labels: LabelSet, size: int) -> None:
    task = ET.SubElement(ET.SubElement(root, "meta"), "task")
    for tag, text in (("name", f"sapiens2-ft pre-annotations: {labels.model_version}"), ("size", str(size)),
                      ("mode", "annotation"), ("overlap", "0"), ("flipped", "False")):
        ET.SubElement(task, tag).text = text
    declared = ET.SubElement(task, "labels")

    def label(name: str, kind: str, parent: str | None = None) -> None:
        element = ET.SubElement(declared, "label")
        ET.SubElement(element, "name").text = name
        ET.SubElement(element, "type").text = kind
        attribute = ET.SubElement(ET.SubElement(element, "attributes"), "attribute")
        for tag, text in (("name", SCORE), ("mutable", "False"), ("input_type", "text"), ("default_value", ""),
                          ("values", "")):
            ET.SubElement(attribute, tag).text = text
        if kind == "skeleton":
            ET.SubElement(element, "svg").text = skeleton_svg(labels)
        if parent:
            ET.SubElement(element, "parent").text = parent

    label(SKELETON, "skeleton")
    for name in labels.names:
        label(name, "points", SKELETON)
    label(BOX, "rectangle")
    ET.SubElement(root.find("meta"), "dumped").text = datetime.now(timezone.utc).isoformat(timespec="seconds")


def _scored(element: ET.Element, score: float) -> None:
    ET.SubElement(element, "attribute", name=SCORE).text = f"{float(score):.4f}"


class CvatPose:
    """``OUT/annotations.xml`` (CVAT for images 1.1) and ``OUT/images/`` (see the module docstring)."""

    name = "cvat"

    def __init__(self, out: Path, labels: LabelSet, min_score: float = 0.0, **_):
        self.out, self.labels, self.min_score = Path(out), labels, min_score
        self.images: list[ET.Element] = []

    def add(self, prediction: ImagePrediction) -> None:
        copy_file(prediction.path, self.out, f"images/{prediction.key}")
        width, height = prediction.size
        image = ET.Element("image", id=str(len(self.images)), name=prediction.key, width=str(width),
                           height=str(height))
        for i, person in enumerate(prediction.people):
            x, y, w, h = (float(v) for v in person["bbox"][:4])
            box = ET.SubElement(image, "box", label=BOX, source="auto", occluded="0", xtl=f"{x:.2f}", ytl=f"{y:.2f}",
                                xbr=f"{x + w:.2f}", ybr=f"{y + h:.2f}", z_order="0", group_id=str(i + 1))
            _scored(box, person["score"])
            skeleton = ET.SubElement(image, "skeleton", label=SKELETON, source="auto", z_order="0",
                                     group_id=str(i + 1))
            for name, (px, py), s in zip(self.labels.names, person["points"], person["scores"]):
                point = ET.SubElement(skeleton, "points", label=name, source="auto", occluded="0",
                                      outside="0" if s >= self.min_score else "1", points=f"{px:.2f},{py:.2f}")
                _scored(point, s)
            _scored(skeleton, person["score"])
        self.images.append(image)

    def close(self) -> str:
        root = ET.Element("annotations")
        ET.SubElement(root, "version").text = "1.1"
        _meta(root, self.labels, len(self.images))
        root.extend(self.images)
        ET.indent(root)
        write_text(self.out, "annotations.xml", '<?xml version="1.0" encoding="utf-8"?>\n'
                   + ET.tostring(root, "unicode") + "\n")
        return (f"CVAT for images 1.1: {len(self.images)} images -> {self.out / 'annotations.xml'} and "
                f"{self.out / 'images'} (zip the folder to import it)")


def flat_names(keys: list[str]) -> list[str]:
    """A flat, unique stem per image key (``a/b.jpg`` -> ``a__b``; a repeated one gets ``_1``, ``_2``, ...)."""
    names, seen = [], set()
    for key in keys:
        stem = "__".join(PurePosixPath(key).with_suffix("").parts)
        name, k = stem, 0
        while name.lower() in seen:
            k += 1
            name = f"{stem}_{k}"
        seen.add(name.lower())
        names.append(name)
    return names


class CvatMasks:
    """The "Segmentation mask 1.1" layout in ``out`` (see the module docstring)."""

    name = "cvat"

    def __init__(self, out: Path, labels: LabelSet, **_):
        self.out, self.labels = Path(out), labels
        self.stems: list[str] = []
        self.seen: set[str] = set()
        self.palette = np.array([voc_colour(k) for k in range(len(labels.names))], np.uint8)

    def add(self, prediction: ImagePrediction) -> None:
        stem = flat_names([prediction.key])[0]
        base, k = stem, 0
        while stem.lower() in self.seen:
            k += 1
            stem = f"{base}_{k}"
        self.seen.add(stem.lower())
        self.stems.append(stem)
        copy_file(prediction.path, self.out, f"JPEGImages/{stem}{PurePosixPath(prediction.key).suffix.lower()}")
        write_image(self.out, f"SegmentationClass/{stem}.png", self.palette[prediction.classes][..., ::-1])

    def close(self) -> str:
        lines = ["# label:color_rgb:parts:actions", f"# sapiens2-ft pre-annotations: {self.labels.model_version}"]
        lines += [f"{name}:{','.join(map(str, voc_colour(k)))}::" for k, name in enumerate(self.labels.names)]
        write_text(self.out, "labelmap.txt", "\n".join(lines) + "\n")
        write_text(self.out, "ImageSets/Segmentation/default.txt", "".join(f"{s}\n" for s in self.stems))
        return (f"CVAT Segmentation mask 1.1: {len(self.stems)} images -> {self.out} (labelmap.txt, "
                f"SegmentationClass/, JPEGImages/; zip the folder to import it)")


def labels_json(labels: LabelSet) -> str:
    """``project_labels`` as the JSON CVAT's "Raw" label editor takes."""
    return json.dumps(project_labels(labels), indent=1) + "\n"
