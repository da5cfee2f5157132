"""Label Studio: tasks with ``predictions`` (its "Basic Label Studio JSON format") and the labelling config they fit.

``OUT/tasks.json`` is a list of tasks ``{"data": {"image": URL}, "predictions": [{"model_version", "score",
"result": [...]}]}``. Pose: per person a ``rectanglelabels`` box (control ``person``, label ``person``) and a
``keypointlabels`` point per keypoint (control ``keypoints``, labelled by the keypoint's name), each ``relation``-ed
to its box (``convert`` ties a person's regions by their relations); seg: a ``polygonlabels`` outline per region
(control ``parts``, labelled by the class's name; ``outlines.py``), painted in the order listed. Coordinates are
percent of ``original_width`` / ``original_height``; every region carries its ``score``. ``OUT/config.xml``: the
labelling config (``sapiens2-ft label-config`` prints the same), so that the names match by construction.

The image URL is ``--image_url`` + the image's path relative to ``--input`` (URL-quoted): by default
``/data/local-files/?d=INPUT/KEY`` (INPUT the ``--input`` folder's name), which Label Studio serves with
``LABEL_STUDIO_LOCAL_FILES_SERVING_ENABLED=true``, ``LABEL_STUDIO_LOCAL_FILES_DOCUMENT_ROOT`` = the folder that holds
``--input``, and a "Local files" storage of the project on the ``--input`` folder (a storage must lie below the root).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path
from urllib.parse import quote

import numpy as np

from datamodules.boundary.writes import write_json, write_text
from sapiens2_ft.labelling.outlines import outlines
from sapiens2_ft.labelling.predictions import ImagePrediction, LabelSet

IMAGE, BOX, KEYPOINTS, PARTS = "image", "person", "keypoints", "parts"
PERSON_LABEL = "person"
LOCAL_FILES = "/data/local-files/?d="
POINT_SIZE_PX = 4  # a keypoint's drawn size (value.width, in percent of the image width)


def config_xml(labels: LabelSet) -> str:
    """The labelling config of a keypoint set (a person box and a keypoint per name) or a class set (a polygon per
    class name, the background's included: it paints the holes of the people)."""
    view = ET.Element("View")
    ET.SubElement(view, "Image", name=IMAGE, value=f"${IMAGE}", zoom="true", zoomControl="true")
    if labels.kind == "keypoint":
        boxes = ET.SubElement(view, "RectangleLabels", name=BOX, toName=IMAGE)
        ET.SubElement(boxes, "Label", value=PERSON_LABEL)
        control = ET.SubElement(view, "KeyPointLabels", name=KEYPOINTS, toName=IMAGE)
    else:
        control = ET.SubElement(view, "PolygonLabels", name=PARTS, toName=IMAGE)
    for name in labels.names:
        ET.SubElement(control, "Label", value=name)
    ET.indent(view)
    about = f"<!-- sapiens2-ft: {labels.kind} labels of {labels.model_version.replace('--', '- -')} -->"
    return f"{about}\n{ET.tostring(view, 'unicode')}\n"


def image_url(prefix: str, key: str) -> str:
    """The task's image: ``prefix`` + the image's key, quoted (``/`` kept)."""
    return prefix + quote(key, safe="/")


def _percent(x: float, size: int) -> float:
    return float(x) / size * 100.0


def _region(rid: str, control: str, kind: str, size: tuple[int, int], value: dict, score: float) -> dict:
    return {"id": rid, "from_name": control, "to_name": IMAGE, "type": kind, "original_width": size[0],
            "original_height": size[1], "image_rotation": 0, "value": value, "score": round(float(score), 4)}


def pose_results(prediction: ImagePrediction, labels: LabelSet, min_score: float) -> list[dict]:
    """The box, keypoints and relations of every person (keypoints scored below ``min_score`` left out)."""
    (width, height), results = prediction.size, []
    for i, person in enumerate(prediction.people):
        x, y, w, h = (float(v) for v in person["bbox"][:4])
        box = f"p{i}"
        results.append(_region(box, BOX, "rectanglelabels", prediction.size,
                               {"x": _percent(x, width), "y": _percent(y, height), "width": _percent(w, width),
                                "height": _percent(h, height), "rotation": 0, "rectanglelabels": [PERSON_LABEL]},
                               person["score"]))
        for k, (name, (px, py), s) in enumerate(zip(labels.names, person["points"], person["scores"])):
            if s < min_score:
                continue
            results.append(_region(f"p{i}k{k}", KEYPOINTS, "keypointlabels", prediction.size,
                                   {"x": _percent(px, width), "y": _percent(py, height),
                                    "width": POINT_SIZE_PX / width * 100, "keypointlabels": [name]}, s))
            results.append({"from_id": box, "to_id": f"p{i}k{k}", "type": "relation", "direction": "right"})
    return results


def class_results(prediction: ImagePrediction, labels: LabelSet) -> list[dict]:
    """One polygon per region of the class map, in painting order."""
    (width, height), results = prediction.size, []
    for j, o in enumerate(outlines(prediction.classes, prediction.confidence)):
        points = [[_percent(px, width), _percent(py, height)] for px, py in o.points.tolist()]
        results.append(_region(f"r{j}", PARTS, "polygonlabels", prediction.size,
                               {"points": points, "closed": True, "polygonlabels": [labels.names[o.class_id]]},
                               o.score))
    return results


def prediction_score(prediction: ImagePrediction) -> float:
    """The task's score (Label Studio sorts tasks by it): the people's mean score, or the mean confidence of the
    people's pixels (the whole image's without people)."""
    if prediction.people is not None:
        return round(float(np.mean([p["score"] for p in prediction.people])) if prediction.people else 0.0, 4)
    people = prediction.classes > 0
    values = prediction.confidence[people] if people.any() else prediction.confidence
    return round(float(values.mean()), 4)


class LabelStudioTasks:
    """``OUT/tasks.json`` and ``OUT/config.xml`` (see the module docstring)."""

    name = "labelstudio"

    def __init__(self, out: Path, labels: LabelSet, image_url: str = LOCAL_FILES, min_score: float = 0.0):
        self.out, self.labels, self.url, self.min_score = Path(out), labels, image_url, min_score
        self.tasks: list[dict] = []

    def add(self, prediction: ImagePrediction) -> None:
        result = (pose_results(prediction, self.labels, self.min_score) if self.labels.kind == "keypoint"
                  else class_results(prediction, self.labels))
        self.tasks.append({"data": {IMAGE: image_url(self.url, prediction.key)},
                           "predictions": [{"model_version": self.labels.model_version,
                                            "score": prediction_score(prediction), "result": result}]})

    def close(self) -> str:
        write_json(self.out, "tasks.json", self.tasks, indent=1)
        write_text(self.out, "config.xml", config_xml(self.labels))
        return (f"Label Studio: {len(self.tasks)} tasks with predictions -> {self.out / 'tasks.json'}, labelling "
                f"config {self.out / 'config.xml'}")
