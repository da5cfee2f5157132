"""A path an annotation names is read only inside its export (convert) or image folder (the data modules): one
leading outside is a named problem, decided before anything is read, with the same message whether or not
such a file exists."""

from __future__ import annotations

import json
import os
from pathlib import Path

import cv2
import numpy as np
import pytest

from conftest import write_coco
from datamodules.coco_keypoints import load_instances
from datamodules.data_check import DataReport, check_coco
from datamodules.errors import DataError
from datamodules.keypoints.metainfo import load_metainfo
from sapiens2_ft.convert import convert


@pytest.fixture
def folders(tmp_path):
    """(export folder with one good image, a private image beside it, a path outside that does not exist)."""
    src, secret = tmp_path / "export", tmp_path / "secret"
    for folder in (src / "images", secret):
        folder.mkdir(parents=True)
    pixels = np.full((40, 30, 3), 90, np.uint8)
    cv2.imwrite(str(src / "images" / "good.png"), pixels)
    cv2.imwrite(str(secret / "private.png"), pixels)
    return src, secret / "private.png", tmp_path / "nothing" / "missing.png"


def outside_names(base: Path, private: Path, missing: Path) -> list[str]:
    """The outside paths as an export would name them from ``base``: relative with ``..``, absolute, one that does
    not exist."""
    return [os.path.relpath(private, base), str(private), os.path.relpath(missing, base)]


def converted(fmt: str, src: Path, out: Path) -> tuple[list[str], list]:
    result = convert(fmt, src, out)
    return sorted(p.name for p in (out / "train" / "images").iterdir()), result.problems.problems


def same_message(problems: list, names: list[str]) -> set[str]:
    """The problems' texts with the named paths taken out: one text when the messages tell nothing apart."""
    texts = [str(p).split(": ", 1)[1] for p in problems]
    return {t.replace(repr(n), "NAME") for t in texts for n in names if repr(n) in t} or set(texts)


def test_labelme_image_paths_outside_the_export(folders, tmp_path):
    src, private, missing = folders
    names = outside_names(src, private, missing)
    for i, name in enumerate(["images/good.png", *names]):
        (src / f"{i}.json").write_text(json.dumps({"shapes": [{"label": "nose", "points": [[5, 5]],
                                                                           "shape_type": "point"}],
                                                              "imagePath": name, "imageData": None}))
    images, problems = converted("labelme", src, tmp_path / "out")
    assert images == ["good.png"]
    assert [p.field for p in problems] == ["imagePath"] * 3
    assert same_message(problems, names) == {"-: imagePath: a path inside the export folder, got NAME (and no "
                                             "imageData); the file is left out"}


def test_cvat_and_coco_image_names_outside_the_export(folders, tmp_path):
    src, private, missing = folders
    names = outside_names(src / "images", private, missing)
    tags = "".join(f'<image id="{i}" name="{n}" width="30" height="40"><points label="nose" points="5,5"/></image>'
                   for i, n in enumerate(["good.png", *names]))
    (src / "annotations.xml").write_text(f"<annotations>{tags}</annotations>")
    images, problems = converted("cvat", src, tmp_path / "xml")
    assert images == ["good.png"] and len(problems) == 3
    assert {str(p).split(": ", 2)[2] for p in problems} == {"name: a path inside the export folder; the image is "
                                                            "left out"}

    (src / "annotations.xml").unlink()
    (src / "annotations").mkdir()
    names = outside_names(src / "images" / "default", private, missing)  # the deepest folder looked in
    coco = {"images": [{"id": i, "file_name": n, "width": 30, "height": 40} for i, n in enumerate(["good.png",
                                                                                                   *names])],
            "annotations": [{"id": 1, "image_id": 0, "category_id": 1, "keypoints": [5, 5, 2]}],
            "categories": [{"id": 1, "name": "person", "keypoints": ["nose"]}]}
    (src / "annotations" / "person_keypoints_default.json").write_text(json.dumps(coco))
    images, problems = converted("cvat", src, tmp_path / "coco")
    assert images == ["good.png"] and len(problems) == 3
    assert {p.expected for p in problems} == {"a path inside the export folder; the image is left out"}


def test_data_module_file_names_outside_the_image_folder(tmp_path):
    root = tmp_path / "data"
    ann = write_coco(root, "val", "val.json", num_images=2)
    (tmp_path / "private.png").write_bytes((root / "val" / json.loads(ann.read_text())["images"][0]["file_name"])
                                           .read_bytes())
    data = json.loads(ann.read_text())
    data["images"][0]["file_name"] = "../../private.png"
    ann.write_text(json.dumps(data))
    metainfo = load_metainfo("coco17")
    with pytest.raises(DataError, match=r"field 'file_name' leads outside the image folder"):
        load_instances(ann, root / "val", metainfo)
    report = DataReport()
    check_coco(ann, root / "val", metainfo, report, "val", decode=True)
    assert [(p.field, p.expected) for p in report.fatal] == [("file_name", f"a path inside the image folder "
                                                                            f"{root / 'val'}")]
