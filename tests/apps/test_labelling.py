"""``predict --format labelstudio | cvat | labelme | coco``: pre-annotations that each tool's import reads, and round
trips that hold: predict -> the tool's format -> the project's own ``convert`` -> the same keypoints (within 0.5 px)
and the same class maps as ``predict`` writes, for a pose model and a seg model in every format. Also: the outlines
that carry a class map paint it back exactly; people and images in another order give the same files; hostile
inputs (a link leading out of --input, a huge or lying image, a name that breaks XML) are refused or escaped."""

from __future__ import annotations

import json
import os
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import cv2
import numpy as np
import pytest

from datamodules.body_parts import SAPIENS2_PART_CLASSES
from sapiens2_ft.convert import convert
from sapiens2_ft.labelling.coco import rle_counts
from sapiens2_ft.labelling.cvat import voc_colour
from sapiens2_ft.labelling.label_studio import config_xml
from sapiens2_ft.labelling.outlines import outlines, paint
from sapiens2_ft.labelling.predictions import LabelSet
from sapiens2_ft.predict.cli import main as predict

FORMATS = ("labelstudio", "cvat", "labelme", "coco")
CONVERT_FORMAT = {"labelstudio": "label-studio", "cvat": "cvat", "labelme": "labelme", "coco": "cvat"}


@pytest.fixture(scope="module")
def tiny_seg_dir(tmp_path_factory) -> Path:
    """A 29-class seg model saved with save_pretrained (seeded): the released seg models' layout."""
    import torch
    from transformers import Sapiens2ForSemanticSegmentation

    from conftest import tiny_pose_config

    out = tmp_path_factory.mktemp("sapiens2-seg-tiny")
    with torch.random.fork_rng():
        torch.manual_seed(3)
        Sapiens2ForSemanticSegmentation(tiny_pose_config(29)).save_pretrained(out)
    return out


@pytest.fixture(scope="module")
def photos(tiny_coco, tmp_path_factory) -> tuple[Path, Path]:
    """Two images in a sub-folder (keys keep it) and their person boxes (a COCO json, two people each)."""
    root = tmp_path_factory.mktemp("photos")
    (root / "in" / "cam1").mkdir(parents=True)
    for p in sorted((tiny_coco / "val2017").glob("*.jpg")):
        shutil.copy(p, root / "in" / "cam1" / p.name)
    boxes = json.loads((tiny_coco / "annotations" / "person_keypoints_val2017.json").read_text())
    for image in boxes["images"]:
        image["file_name"] = f"cam1/{image['file_name']}"
    (root / "boxes.json").write_text(json.dumps(boxes))
    return root / "in", root / "boxes.json"


def run_pose(model: Path, photos, out: Path, *extra: str) -> Path:
    images, boxes = photos
    source = ["--boxes", str(boxes)] if boxes is not None else ["--whole_image"]
    predict(["--model", str(model), "--keypoints", "coco17", "--input", str(images), "--out", str(out),
             *source, "--workers", "0", *extra])
    return out


def run_seg(model: Path, images: Path, out: Path, *extra: str) -> Path:
    predict(["--model", str(model), "--input", str(images), "--out", str(out), "--workers", "0", *extra])
    return out


def accepted(tasks_file: Path, images: Path, out: Path) -> Path:
    """What Label Studio exports once the predictions are accepted as they are ("Create annotations from
    predictions", or a person submitting each task unchanged): each task's prediction result as its annotation,
    the export saved beside copies of the images."""
    shutil.copytree(images, out)
    tasks = json.loads(tasks_file.read_text())
    for k, task in enumerate(tasks):
        task.update(id=k + 1, annotations=[{"id": k + 1, "result": task["predictions"][0]["result"],
                                            "was_cancelled": False}])
    (out / "export.json").write_text(json.dumps(tasks))
    return out


def tool_export(fmt: str, written: Path, images: Path, tmp_path: Path) -> Path:
    return accepted(written / "tasks.json", images, tmp_path / "ls_export") if fmt == "labelstudio" else written


def people_by_image(coco_file: Path) -> dict[str, list[np.ndarray]]:
    """image file name (convert flattens ``cam1/a.jpg`` to ``cam1__a.jpg``; Label Studio keeps no folder) -> its
    people's (K, 3) x, y, v (or score), sorted by their boxes."""
    data = json.loads(coco_file.read_text())
    names = {i["id"]: i["file_name"].replace("/", "__").split("__")[-1] for i in data["images"]}
    found: dict[str, list] = {n: [] for n in names.values()}
    for ann in data["annotations"]:
        found[names[ann["image_id"]]].append((tuple(np.round(ann["bbox"], 1)), np.reshape(ann["keypoints"], (-1, 3))))
    return {n: [k for _, k in sorted(p, key=lambda e: e[0])] for n, p in found.items()}


def predicted_people(tmp_path: Path, model: Path, photos) -> dict[str, list[np.ndarray]]:
    out = run_pose(model, photos, tmp_path / "plain")
    results = json.loads((out / "keypoints.json").read_text())
    images = json.loads((out / "images.json").read_text())
    data = {"images": images["images"], "annotations": results}
    (out / "joined.json").write_text(json.dumps(data))
    return people_by_image(out / "joined.json")


@pytest.mark.parametrize("fmt", FORMATS)
def test_pose_round_trip_gives_the_same_keypoints(fmt, tiny_pose308_dir, photos, tmp_path):
    expected = predicted_people(tmp_path, tiny_pose308_dir, photos)
    written = run_pose(tiny_pose308_dir, photos, tmp_path / fmt, "--format", fmt)
    result = convert(CONVERT_FORMAT[fmt], tool_export(fmt, written, photos[0], tmp_path), tmp_path / "data",
                     keypoints="coco17")
    assert not result.problems.fatal, result.problems.format()
    got = people_by_image(tmp_path / "data" / "annotations" / "train.json")
    assert got.keys() == expected.keys() and sum(map(len, got.values())) == 4
    for name, people in expected.items():
        assert len(got[name]) == len(people)
        for a, b in zip(people, got[name]):
            assert np.abs(a[:, :2] - b[:, :2]).max() < 0.5, (fmt, name)
            assert (b[:, 2] == 2).all()


@pytest.mark.parametrize("fmt", FORMATS)
def test_keypoints_below_min_score_come_back_unlabelled(fmt, tiny_pose308_dir, photos, tmp_path):
    expected = predicted_people(tmp_path, tiny_pose308_dir, photos)
    threshold = float(np.median(np.concatenate([p[:, 2] for ps in expected.values() for p in ps])))
    written = run_pose(tiny_pose308_dir, photos, tmp_path / fmt, "--format", fmt, "--min_score", str(threshold))
    convert(CONVERT_FORMAT[fmt], tool_export(fmt, written, photos[0], tmp_path), tmp_path / "data",
            keypoints="coco17")
    got = people_by_image(tmp_path / "data" / "annotations" / "train.json")
    for name, people in expected.items():
        for a, b in zip(people, got[name]):
            kept = a[:, 2] >= threshold
            assert 0 < kept.sum() < len(kept)
            assert (b[kept, 2] == 2).all() and (b[~kept, 2] == 0).all()
            assert np.abs(a[kept, :2] - b[kept, :2]).max() < 0.5


@pytest.mark.parametrize("fmt", FORMATS)
def test_seg_round_trip_gives_the_same_class_maps(fmt, tiny_seg_dir, dense_root, tmp_path):
    images = dense_root / "val" / "images"
    plain = run_seg(tiny_seg_dir, images, tmp_path / "plain")
    written = run_seg(tiny_seg_dir, images, tmp_path / fmt, "--format", fmt)
    result = convert(CONVERT_FORMAT[fmt], tool_export(fmt, written, images, tmp_path), tmp_path / "data")
    assert not result.problems.fatal, result.problems.format()
    maps = sorted((tmp_path / "data" / "train" / "labels").glob("*.png"))
    assert len(maps) == len(list(images.glob("*.*"))) == 2
    for label_file in maps:
        expected = cv2.imread(str(plain / f"{label_file.stem}.png"), cv2.IMREAD_UNCHANGED)
        got = cv2.imread(str(label_file), cv2.IMREAD_UNCHANGED)
        assert len(np.unique(expected)) > 3  # a map with regions and holes, not one class
        np.testing.assert_array_equal(got, expected, err_msg=f"{fmt} {label_file.name}")


def test_outlines_paint_class_maps_back_exactly():
    """Noise, blobs with holes, one-pixel regions, diagonal touches: the outlines paint every map back, and the
    unenclosed background is left out."""
    rng = np.random.default_rng(0)
    for trial in range(150):
        h, w = (int(v) for v in rng.integers(3, 30, 2))
        if trial % 3 == 0:
            classes = rng.integers(0, 4, (h, w))
        elif trial % 3 == 1:
            classes = np.zeros((h, w), np.uint8)
            for c in range(1, 4):
                cv2.circle(classes, (int(rng.integers(0, w)), int(rng.integers(0, h))), int(rng.integers(1, 8)), c, -1)
        else:
            classes = (rng.random((h, w)) < 0.5) * rng.integers(1, 6, (h, w))
        classes = classes.astype(np.uint8)
        found = outlines(classes)
        np.testing.assert_array_equal(paint(found, classes.shape), classes)
        assert all(len(o.points) >= 3 for o in found)
    ring = np.zeros((9, 9), np.uint8)
    ring[1:8, 1:8], ring[3:6, 3:6], ring[4, 4] = 1, 0, 2  # a part with a hole holding another part
    found = outlines(ring)
    assert [o.class_id for o in found] == [1, 0, 2]  # the hole (background) is kept, the outside is not
    np.testing.assert_array_equal(paint(found, ring.shape), ring)


def test_files_do_not_depend_on_the_order_of_people(tiny_pose308_dir, photos, tmp_path):
    """The same boxes listed in reverse order give the same people in every format (matched by place)."""
    images, boxes = photos
    data = json.loads(boxes.read_text())
    data["annotations"] = data["annotations"][::-1]
    reverse = tmp_path / "reverse.json"
    reverse.write_text(json.dumps(data))
    for fmt in ("coco",):
        a = run_pose(tiny_pose308_dir, photos, tmp_path / "a", "--format", fmt)
        b = run_pose(tiny_pose308_dir, (images, reverse), tmp_path / "b", "--format", fmt)
        first = people_by_image(a / "annotations" / "person_keypoints_default.json")
        second = people_by_image(b / "annotations" / "person_keypoints_default.json")
        assert first.keys() == second.keys()
        for name in first:
            for p, q in zip(first[name], second[name]):
                np.testing.assert_allclose(p, q, atol=0.02)


def test_each_format_writes_what_its_tool_reads(tiny_pose308_dir, tiny_seg_dir, photos, dense_root, tmp_path):
    """The documented shape of each file, field by field."""
    out = run_pose(tiny_pose308_dir, photos, tmp_path / "ls", "--format", "labelstudio", "--image_url",
                   "https://photos.example/x/", "--model_version", "pose-v3")
    tasks = json.loads((out / "tasks.json").read_text())
    assert [t["data"]["image"] for t in tasks] == ["https://photos.example/x/cam1/000000.jpg",
                                                    "https://photos.example/x/cam1/000001.jpg"]
    prediction = tasks[0]["predictions"][0]
    assert prediction["model_version"] == "pose-v3" and 0 <= prediction["score"] <= 1
    kinds = [r["type"] for r in prediction["result"]]
    assert kinds.count("rectanglelabels") == 2 and kinds.count("keypointlabels") == 34 == kinds.count("relation")
    point = next(r for r in prediction["result"] if r["type"] == "keypointlabels")
    assert point["from_name"] == "keypoints" and point["to_name"] == "image" and point["original_width"] == 192
    assert set(point["value"]) == {"x", "y", "width", "keypointlabels"} and 0 <= point["score"] <= 1
    config = ET.fromstring((out / "config.xml").read_text().split("\n", 1)[1])
    assert [c.get("value") for c in config.find("KeyPointLabels")][:3] == ["nose", "left_eye", "right_eye"]

    out = run_pose(tiny_pose308_dir, photos, tmp_path / "cvat", "--format", "cvat")
    root = ET.parse(out / "annotations.xml").getroot()
    assert root.findtext("version") == "1.1" and len(root.findall("image")) == 2
    skeleton = root.find("image/skeleton")
    assert skeleton.get("label") == "person" and len(skeleton.findall("points")) == 17
    assert (out / "images" / "cam1" / "000000.jpg").is_file()

    out = run_pose(tiny_pose308_dir, photos, tmp_path / "labelme", "--format", "labelme")
    page = json.loads((out / "cam1" / "000000.json").read_text())
    assert set(page) == {"version", "flags", "shapes", "imagePath", "imageData", "imageHeight", "imageWidth"}
    assert page["imagePath"] == "000000.jpg" and (out / "cam1" / "000000.jpg").is_file()
    assert {s["shape_type"] for s in page["shapes"]} == {"rectangle", "point"}
    assert {s["group_id"] for s in page["shapes"]} == {0, 1}

    out = run_seg(tiny_seg_dir, dense_root / "val" / "images", tmp_path / "masks", "--format", "cvat")
    labelmap = (out / "labelmap.txt").read_text().splitlines()
    assert labelmap[2] == "Background:0,0,0::" and len(labelmap) == 2 + len(SAPIENS2_PART_CLASSES)
    stems = (out / "ImageSets" / "Segmentation" / "default.txt").read_text().split()
    assert all((out / "SegmentationClass" / f"{s}.png").is_file() for s in stems) and len(stems) == 2

    out = run_seg(tiny_seg_dir, dense_root / "val" / "images", tmp_path / "coco", "--format", "coco")
    coco = json.loads((out / "annotations" / "instances_default.json").read_text())
    assert coco["categories"][0] == {"id": 1, "name": SAPIENS2_PART_CLASSES[1], "supercategory": ""}
    assert all(sum(a["segmentation"]["counts"]) == 256 * 192 and a["iscrowd"] == 1 for a in coco["annotations"])


def test_rle_counts_and_voc_colours():
    mask = np.array([[0, 1], [1, 1], [0, 0]], bool)  # column-major: 0 1 0 | 1 1 0
    assert rle_counts(mask) == [1, 1, 1, 2, 1]
    assert rle_counts(np.ones((2, 2), bool)) == [0, 4]
    assert [voc_colour(k) for k in range(4)] == [(0, 0, 0), (128, 0, 0), (0, 128, 0), (128, 128, 0)]


def test_a_task_without_labels_the_tools_draw_is_refused(tmp_path):
    from sapiens2_ft.labelling.predictions import LabellingError, label_kind

    assert label_kind("pose") == "keypoint" and label_kind("seg") == "class"
    with pytest.raises(LabellingError, match="normal model gives fixed outputs"):
        label_kind("normal")


def test_names_that_break_xml_are_escaped():
    """A keypoint set from someone else may name a keypoint `"/><Image value="$x`; the config stays one View."""
    hostile = 'a"/><Image name="x" value="$evil'
    xml = config_xml(LabelSet("keypoint", ["nose", hostile, "c&d"], "v1 <b>"))
    root = ET.fromstring(xml.split("\n", 1)[1])
    assert len(root.findall("Image")) == 1
    assert [label.get("value") for label in root.find("KeyPointLabels")] == ["nose", hostile, "c&d"]


def test_a_link_leading_out_of_input_is_not_copied_into_the_tool(tiny_pose308_dir, photos, tmp_path, capsys):
    images, boxes = photos
    secret = tmp_path / "private" / "secret.jpg"
    secret.parent.mkdir()
    shutil.copy(next(images.rglob("*.jpg")), secret)
    linked = tmp_path / "linked"
    shutil.copytree(images, linked)
    os.symlink(secret, linked / "cam1" / "zz_link.jpg")
    out = run_pose(tiny_pose308_dir, (linked, None), tmp_path / "out", "--format", "labelme")
    assert "zz_link.jpg is a link leading out" in capsys.readouterr().err
    assert not list(out.rglob("zz_link*")) and (out / "cam1" / "000000.json").is_file()


def test_a_huge_or_lying_image_is_skipped_before_decoding(tiny_pose308_dir, photos, tmp_path, capsys):
    """A PNG bomb (144 megapixels of zeros in a small file) and a PNG whose header alone claims them are skipped
    from their headers (not decoded, not copied); the other images are pre-annotated."""
    from bombs import png_bomb

    images, boxes = photos
    folder = tmp_path / "in"
    shutil.copytree(images, folder)
    (folder / "cam1" / "bomb.png").write_bytes(png_bomb())
    (folder / "cam1" / "liar.png").write_bytes(png_bomb(valid=False))
    out = run_pose(tiny_pose308_dir, (folder, None), tmp_path / "out", "--format", "coco")
    assert "2 images skipped" in capsys.readouterr().out
    coco = json.loads((out / "annotations" / "person_keypoints_default.json").read_text())
    assert [i["file_name"] for i in coco["images"]] == ["cam1/000000.jpg", "cam1/000001.jpg"]
    assert not list(out.rglob("*.png"))


def test_an_output_link_is_not_written_through(tiny_pose308_dir, photos, tmp_path):
    out = tmp_path / "out"
    elsewhere = tmp_path / "elsewhere"
    (out).mkdir()
    elsewhere.mkdir()
    os.symlink(elsewhere, out / "images")
    with pytest.raises(SystemExit, match="is a symbolic link; nothing is written through a link"):
        run_pose(tiny_pose308_dir, photos, out, "--format", "cvat")
    assert not list(elsewhere.iterdir())


def test_label_config_prints_the_names_the_pre_annotations_use(tiny_seg_dir, capsys):
    """Label Studio's XML and CVAT's labels of a keypoint set, a class set and a model, with the names predict's
    files use."""
    from sapiens2_ft.labelling.config import main as label_config

    assert label_config(["--keypoints", "coco17", "--tool", "cvat"]) == 0
    skeleton, box = json.loads(capsys.readouterr().out)
    assert skeleton["type"] == "skeleton" and [s["name"] for s in skeleton["sublabels"]][:2] == ["nose", "left_eye"]
    assert skeleton["svg"].count("data-type=\"element node\"") == 17 and box["name"] == "person_box"
    assert label_config(["--classes", "parts", "--tool", "labelstudio"]) == 0
    view = ET.fromstring(capsys.readouterr().out.split("\n", 1)[1])
    assert [c.get("value") for c in view.find("PolygonLabels")] == list(SAPIENS2_PART_CLASSES)
    assert label_config(["--model", str(tiny_seg_dir), "--tool", "cvat"]) == 0
    labels = json.loads(capsys.readouterr().out)
    assert [label["name"] for label in labels] == list(SAPIENS2_PART_CLASSES) and labels[1]["color"] == "#800000"
    with pytest.raises(SystemExit, match="no_such_set"):
        label_config(["--keypoints", "no_such_set"])


def test_label_studio_urls_of_a_folder_of_one_image_and_of_odd_names(tmp_path):
    """The default URL names the --input folder under the document root (one image: its folder); keys are quoted,
    so a name with a space, '#' or '?' stays one path."""
    from sapiens2_ft.labelling.formats import default_image_url
    from sapiens2_ft.labelling.label_studio import image_url

    (tmp_path / "my photos").mkdir()
    (tmp_path / "my photos" / "a.jpg").write_bytes(b"")
    assert default_image_url(tmp_path / "my photos") == "/data/local-files/?d=my%20photos/"
    assert default_image_url(tmp_path / "my photos" / "a.jpg") == "/data/local-files/?d=my%20photos/"
    assert image_url("/data/local-files/?d=in/", "cam 1/x#2?.jpg") == "/data/local-files/?d=in/cam%201/x%232%3F.jpg"
