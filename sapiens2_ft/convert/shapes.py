"""Shapes of the annotation tools that draw one element per keypoint (LabelMe, CVAT, Label Studio), tied into
people, and the label-map painting they share.

Tying shapes to a person: shapes with the same group key (LabelMe ``group_id``, CVAT ``group_id`` or a
skeleton, Label Studio relations / ``parentID``) are one person; every ungrouped box is a person of its own; an
ungrouped keypoint joins the only person of the image, else the one person whose box contains it, and is
reported when that is ambiguous. Ungrouped polygons extend a person's box only when the image has one person.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from datamodules.data_check import DataReport
from sapiens2_ft.convert.masks import Mask
from sapiens2_ft.convert.records import Person, Region

SUBPIXEL_BITS = 4  # polygon vertices are rasterised at 1/16 pixel


@dataclass
class Shape:
    """One drawn element: ``kind`` point | box | polygon | mask; ``points`` (N, 2) pixels (a box: its 2 corners)."""

    kind: str
    label: str
    where: str
    points: np.ndarray
    group: object = None
    visibility: int = 2  # points: 2 visible, 1 occluded
    mask: Mask | None = None  # kept encoded, placed in the image by its offset
    z: int = 0


def at(record: str, where: str) -> str:
    """The record a problem names: the image's record (when the file has several images) and the shape."""
    return where if record == "-" else f"{record}, {where}"


def _contains(box, xy) -> bool:
    return box is not None and box[0] <= xy[0] <= box[2] and box[1] <= xy[1] <= box[3]


def _add_keypoint(person: Person, shape: Shape, ann_file: Path, record: str, report: DataReport) -> None:
    if shape.label in person.keypoints:
        report.add(ann_file, at(record, shape.where), "label",
                   f"keypoint '{shape.label}' is labelled twice for {person.where}; the first is kept", fatal=False)
        return
    x, y = (float(v) for v in shape.points[0])
    person.keypoints[shape.label] = (x, y, shape.visibility)


def people_from_shapes(shapes: list[Shape], ann_file: Path, record: str, report: DataReport) -> list[Person]:
    """The people of one image (rules in the module docstring); a group's key names its person."""
    groups: dict[object, Person] = {}
    people: list[Person] = []

    def person_of(key) -> Person:
        if key not in groups:
            groups[key] = Person(str(key))
            people.append(groups[key])
        return groups[key]

    loose_points, loose_polygons = [], []
    for shape in shapes:
        if shape.group is None:
            if shape.kind == "box":
                people.append(Person(shape.where, box=_box(shape.points)))
            elif shape.kind == "point":
                loose_points.append(shape)
            elif shape.kind in ("polygon", "mask"):
                loose_polygons.append(shape)
            continue
        person = person_of(shape.group)
        if shape.kind == "box":
            if person.box is not None:
                report.add(ann_file, at(record, shape.where), "group",
                           f"{person.where} has a second box; the first is kept", fatal=False)
            else:
                person.box = _box(shape.points)
        elif shape.kind == "point":
            _add_keypoint(person, shape, ann_file, record, report)
        else:
            person.extent.append(_extent_points(shape))
    if loose_points and not people:
        people.append(Person("ungrouped shapes"))
    for shape in loose_points:
        if len(people) == 1:
            target = people[0]
        else:
            inside = [p for p in people if _contains(p.box, shape.points[0])]
            if len(inside) != 1:
                why = "inside no person's box" if not inside else f"inside {len(inside)} people's boxes"
                report.add(ann_file, at(record, shape.where), "group",
                           f"keypoint '{shape.label}' belongs to no single person ({why}; tie it with a group)",
                           fatal=False)
                continue
            target = inside[0]
        _add_keypoint(target, shape, ann_file, record, report)
    if len(people) == 1:
        people[0].extent += [_extent_points(s) for s in loose_polygons]
    return people


def regions_from_shapes(shapes: list[Shape]) -> list[Region]:
    return [Region(s.label, s.where, points=s.points if s.kind == "polygon" else None, mask=s.mask, z=s.z)
            for s in shapes if s.kind in ("polygon", "mask")]


def _box(corners: np.ndarray) -> tuple[float, float, float, float]:
    (x1, y1), (x2, y2) = corners.min(0), corners.max(0)
    return float(x1), float(y1), float(x2), float(y2)


def _extent_points(shape: Shape) -> np.ndarray | Mask:
    return shape.mask if shape.kind == "mask" else shape.points  # a mask's extent: found when it is decoded


def paint_region(labels: np.ndarray, region: Region, value: int, scale=(1.0, 1.0)) -> None:
    """Paint ``region`` into ``labels`` in place: a pixel is painted when its centre (integer coordinates) lies in
    the polygon or on its edge (``cv2.fillPoly``); a mask is decoded and copied at its offset (clipped to the
    image; ``DataError`` when it does not decode)."""
    if region.points is not None:
        points = np.round(region.points * scale * (1 << SUBPIXEL_BITS)).astype(np.int32)
        cv2.fillPoly(labels, [points.reshape(-1, 1, 2)], int(value), lineType=cv2.LINE_8, shift=SUBPIXEL_BITS)
        return
    x0, y0 = region.mask.offset
    h, w = labels.shape
    mask = region.mask.decode()[max(0, -y0):h - y0, max(0, -x0):w - x0]
    view = labels[max(0, y0):max(0, y0) + mask.shape[0], max(0, x0):max(0, x0) + mask.shape[1]]
    view[mask] = value
