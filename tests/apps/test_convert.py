"""``python -m sapiens2_ft.convert``: small exports written here in each tool's documented format (LabelMe JSON,
CVAT for images 1.1 XML, CVAT's COCO keypoints export, Label Studio JSON, Ultralytics YOLO-pose), converted and
compared with the scene they were written from; the output passes the data checks and trains 2 steps."""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np
import pytest
import yaml

from conftest import COCO17, TEMPLATE, pose_run_args
from datamodules.body_parts import SAPIENS2_PART_CLASSES
from datamodules.data_check import DataReport, check_coco, check_dense
from datamodules.keypoints.metainfo import load_metainfo
from datamodules.pose_datamodule import PoseDataModule
from sapiens2_ft.convert import ConvertError, convert, summary
from sapiens2_ft.convert.__main__ import main as convert_main
from sapiens2_ft.convert.shapes import Shape, people_from_shapes
from sapiens2_ft.tasks.dense_data import DenseTaskData, dense_targets

W, H = 120, 160
CLASS = {name: i for i, name in enumerate(SAPIENS2_PART_CLASSES)}


@dataclass
class Person:
    keypoints: dict[str, tuple[float, float, int]]  # COCO-17 name -> x, y, v (1 occluded, 2 visible)
    box: tuple[float, float, float, float] | None  # x1, y1, x2, y2
    polygon: str | None = None  # the label of a scene rectangle tied to this person (extends a missing box)


@dataclass
class Scene:
    """One image: its people and its label regions (integer rectangles as polygons, and one mask)."""

    name: str
    people: list[Person]
    rects: list[tuple[str, tuple[int, int, int, int]]]  # label, (x1, y1, x2, y2) inclusive pixel corners
    mask: tuple[str, tuple[int, int], np.ndarray] | None = None  # label, (left, top), bool mask
    pixels: np.ndarray = field(default=None)


def make_scene(i: int) -> Scene:
    rng = np.random.default_rng(i)
    dx = 4 * i
    points = np.round(TEMPLATE * [50, 130] + [8 + dx, 10], 2)
    first = {n: (float(x), float(y), 1 if n == "left_wrist" else 2) for n, (x, y) in zip(COCO17, points)
             if n not in ("left_ear", "right_ear")}
    second = {n: (float(x), float(y), 2) for n, (x, y) in zip(COCO17, np.round(TEMPLATE * [30, 60] + [80, 20 + dx], 2))
              if n in ("nose", "left_shoulder", "right_shoulder", "left_hip")}
    rects = [("Torso", (20 + dx, 50, 50 + dx, 90)), ("Face_Neck", (25 + dx, 10, 40 + dx, 35)),
             ("Upper_Clothing", (15 + dx, 45, 55 + dx, 70)), ("hat", (28, 0, 38, 6))]
    yy, xx = np.mgrid[:12, :10]
    mask = ("Hair", (90, 120 + i), (yy - 6) ** 2 + (xx - 5) ** 2 < 20)
    pixels = rng.integers(0, 255, (H, W, 3), dtype=np.uint8)
    return Scene(f"img{i}.png", [Person(first, (5.0 + dx, 4.0, 62.5 + dx, 150.0)), Person(second, None, "hat")],
                 rects, mask, pixels)


def expected_labels(scene: Scene, with_mask: bool = True, classes: dict = CLASS) -> np.ndarray:
    labels = np.zeros((H, W), np.uint8)
    for label, (x1, y1, x2, y2) in scene.rects:  # file order = painting order; a pixel centre on the edge counts
        labels[y1:y2 + 1, x1:x2 + 1] = classes.get(label, 255)
    if with_mask and scene.mask:
        label, (left, top), mask = scene.mask
        labels[top:top + mask.shape[0], left:left + mask.shape[1]][mask] = classes.get(label, 255)
    return labels


def expected_box(person: Person, scene: Scene | None = None) -> list[float]:
    """The tool's box, else the extent of the keypoints and (with ``scene``) of the person's polygon."""
    if person.box is not None:
        x1, y1, x2, y2 = person.box
    else:
        xy = [p[:2] for p in person.keypoints.values()]
        xy += [corner for label, r in (scene.rects if scene else []) if label == person.polygon
               for corner in rect_points(*r)]
        (x1, y1), (x2, y2) = np.min(xy, 0), np.max(xy, 0)
    return [x1, y1, x2 - x1, y2 - y1]


def expected_keypoints(person: Person, occlusion: bool = True) -> np.ndarray:
    out = np.zeros((17, 3))
    for name, (x, y, v) in person.keypoints.items():
        out[COCO17.index(name)] = [x, y, v if occlusion else 2]
    return out


def write_png(path: Path, pixels: np.ndarray) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(path), cv2.cvtColor(pixels, cv2.COLOR_RGB2BGR))


def rect_points(x1, y1, x2, y2):
    return [[x1, y1], [x2, y1], [x2, y2], [x1, y2]]


def check_output(out: Path, split: str, scenes: list[Scene], occlusion: bool = True, seg: bool = True,
                 with_mask: bool = True, polygons: bool = True, classes: dict = CLASS) -> None:
    """Keypoints, boxes and label maps as the scenes say, and no problem in the data checks."""
    data = json.loads((out / "annotations" / f"{split}.json").read_text())
    by_image = {image["id"]: image["file_name"] for image in data["images"]}
    assert sorted(by_image.values()) == sorted(s.name for s in scenes)
    assert data["categories"][0]["keypoints"] == COCO17
    for scene in scenes:
        image_id = next(i for i, n in by_image.items() if n == scene.name)
        anns = sorted((a for a in data["annotations"] if a["image_id"] == image_id), key=lambda a: a["bbox"][0])
        context = scene if polygons else None
        people = sorted(scene.people, key=lambda p: expected_box(p, context)[0])
        assert len(anns) == len(people)
        for ann, person in zip(anns, people):
            np.testing.assert_allclose(np.reshape(ann["keypoints"], (17, 3)), expected_keypoints(person, occlusion),
                                       atol=1e-6)
            np.testing.assert_allclose(ann["bbox"], expected_box(person, context), atol=1e-6)
            assert ann["num_keypoints"] == len(person.keypoints)
        copied = cv2.cvtColor(cv2.imread(str(out / split / "images" / scene.name)), cv2.COLOR_BGR2RGB)
        np.testing.assert_array_equal(copied, scene.pixels)
        if seg:
            labels = cv2.imread(str(out / split / "labels" / f"{Path(scene.name).stem}.png"), cv2.IMREAD_UNCHANGED)
            np.testing.assert_array_equal(labels, expected_labels(scene, with_mask, classes))
    report = DataReport()
    check_coco(out / "annotations" / f"{split}.json", out / split / "images", load_metainfo("coco17"), report, split)
    if seg:
        check_dense(out, split, dense_targets("seg"), max(classes.values()) + 1, report)
    assert not report.problems, report.format()


# ---- LabelMe --------------------------------------------------------------------------------------------------

def labelme_name(name: str) -> str:
    return name.replace("_", " ").title()  # "left_eye" -> "Left Eye": matched after normalising


def write_labelme(src: Path, scene: Scene, embed: bool = False) -> Path:
    shapes = []
    for g, person in enumerate(scene.people, 1):
        if person.box is not None:
            x1, y1, x2, y2 = person.box
            shapes.append({"label": "person", "points": [[x2, y2], [x1, y1]], "group_id": g,
                           "shape_type": "rectangle", "flags": {}})
        shapes += [{"label": labelme_name(n), "points": [[x, y]], "group_id": g, "shape_type": "point", "flags": {}}
                   for n, (x, y, _) in person.keypoints.items()]
    shapes.append({"label": "tail", "points": [[30.0, 140.0]], "group_id": 1, "shape_type": "point", "flags": {}})
    tied = {p.polygon: g for g, p in enumerate(scene.people, 1) if p.polygon}
    shapes += [{"label": label, "points": rect_points(*r), "group_id": tied.get(label), "shape_type": "polygon",
                "flags": {}} for label, r in scene.rects]
    label, (left, top), mask = scene.mask
    png = cv2.imencode(".png", mask.astype(np.uint8) * 255)[1].tobytes()
    shapes.append({"label": label, "points": [[left, top], [left + mask.shape[1] - 1, top + mask.shape[0] - 1]],
                   "group_id": None, "shape_type": "mask", "flags": {}, "mask": base64.b64encode(png).decode()})
    image_data = None
    if embed:
        image_data = base64.b64encode(cv2.imencode(".png", cv2.cvtColor(scene.pixels, cv2.COLOR_RGB2BGR))[1]).decode()
    else:
        write_png(src / scene.name, scene.pixels)
    doc = {"version": "5.4.1", "flags": {}, "shapes": shapes, "imagePath": scene.name, "imageData": image_data,
           "imageHeight": H, "imageWidth": W}
    path = src / f"{Path(scene.name).stem}.json"
    path.write_text(json.dumps(doc))
    return path


@pytest.fixture(scope="module")
def labelme_result(tmp_path_factory):
    src, out = tmp_path_factory.mktemp("labelme"), tmp_path_factory.mktemp("labelme_out") / "data"
    scenes = [make_scene(i) for i in range(4)]
    for i, scene in enumerate(scenes):
        write_labelme(src, scene, embed=i == 1)
    return scenes, out, convert("labelme", src, out, val_fraction=0.25)


def test_labelme_keypoints_boxes_and_label_maps(labelme_result):
    scenes, out, result = labelme_result
    val = json.loads((out / "annotations" / "val.json").read_text())["images"][0]["file_name"]
    assert result.splits["val"]["images"] == 1 and result.splits["train"]["images"] == 3
    check_output(out, "val", [s for s in scenes if s.name == val], occlusion=False)
    check_output(out, "train", [s for s in scenes if s.name != val], occlusion=False)
    assert result.keypoints.unmatched == {"tail": 4}
    assert result.classes.unmatched == {"hat": 4}
    assert result.keypoints.matched["left_ear"] == 0 and result.keypoints.matched["nose"] == 8
    text = summary(result)
    assert "'tail' 4" in text and "'hat' 4" in text and "left_ear, right_ear" in text
    assert "left_eye 4" in text  # missing for the second person of every image
    assert not result.problems.problems and not result.check.problems
    assert (out / "classes.txt").read_text().splitlines() == list(SAPIENS2_PART_CLASSES)
    assert not DenseTaskData("seg", root=str(out)).check().problems  # its default layout: what check_data runs


def test_labelme_bad_records_name_the_file_and_shape(tmp_path, capsys):
    src = tmp_path / "src"
    src.mkdir()
    scene = make_scene(0)
    good = write_labelme(src, scene)
    doc = json.loads(good.read_text())
    doc["shapes"][1]["points"] = [[12.0]]  # a point with one coordinate
    doc["shapes"].append({"label": "arm", "points": [[1, 1], [5, 5]], "shape_type": "line", "group_id": None})
    (src / "bad.json").write_text(json.dumps({**doc, "imagePath": scene.name}))
    (src / "broken.json").write_text("{")
    code = convert_main(["labelme", str(src), "--out", str(tmp_path / "out")])
    printed = capsys.readouterr()
    assert code == 1
    assert f"{src / 'bad.json'}: shapes[1] (point 'Nose'): points: [x, y] pairs of finite numbers" in printed.out
    assert f"{src / 'bad.json'}: shapes[26] (line 'arm'): shape_type: 'line' is not converted" in printed.out
    assert f"{src / 'broken.json'}: -: json: valid JSON" in printed.out
    assert "bad records of the export were left out" in printed.err
    # nothing is overwritten
    assert convert_main(["labelme", str(src), "--out", str(tmp_path / "out")]) == 2
    assert "output files exist already" in capsys.readouterr().err


# ---- CVAT -----------------------------------------------------------------------------------------------------

def run_lengths(flat: np.ndarray) -> list[int]:
    """Lengths of the runs of equal values along ``flat``, background (False) first."""
    counts, current, run = [], False, 0
    for value in flat:
        if value == current:
            run += 1
        else:
            counts.append(run)
            current, run = value, 1
    return counts + [run]


def cvat_rle(mask: np.ndarray) -> str:
    """Run lengths over the mask's rows, background first (CVAT's mask ``rle``)."""
    return ", ".join(str(c) for c in run_lengths(mask.reshape(-1)))


def write_cvat_xml(src: Path, scenes: list[Scene]) -> None:
    images = []
    for k, scene in enumerate(scenes):
        write_png(src / "images" / scene.name, scene.pixels)
        parts = []
        for g, person in enumerate(scene.people, 1):
            if person.box is not None:
                x1, y1, x2, y2 = person.box
                parts.append(f'<box label="person" source="manual" occluded="0" xtl="{x1:.2f}" ytl="{y1:.2f}" '
                             f'xbr="{x2:.2f}" ybr="{y2:.2f}" z_order="0" group_id="{g}"></box>')
            joints = ""
            for n in COCO17:
                x, y, v = person.keypoints.get(n, (0, 0, 0))
                joints += (f'<points label="{n}" source="manual" outside="{int(v == 0)}" occluded="{int(v == 1)}" '
                           f'points="{x:.2f},{y:.2f}"></points>')
            parts.append(f'<skeleton label="person" source="manual" z_order="0" group_id="{g}">{joints}</skeleton>')
        tied = {p.polygon: g for g, p in enumerate(scene.people, 1) if p.polygon}
        for z, (label, r) in enumerate(scene.rects):
            pts = ";".join(f"{x:.2f},{y:.2f}" for x, y in rect_points(*r))
            group = f' group_id="{tied[label]}"' if label in tied else ""
            parts.append(f'<polygon label="{label}" source="manual" occluded="0" points="{pts}" z_order="{z}"{group}>'
                         '</polygon>')
        label, (left, top), mask = scene.mask
        parts.append(f'<mask label="{label}" source="manual" occluded="0" rle="{cvat_rle(mask)}" left="{left}" '
                     f'top="{top}" width="{mask.shape[1]}" height="{mask.shape[0]}" z_order="9"></mask>')
        parts.append('<polyline label="line" source="manual" occluded="0" points="1,1;5,5" z_order="0"></polyline>')
        images.append(f'<image id="{k}" name="{scene.name}" width="{W}" height="{H}">{"".join(parts)}</image>')
    (src / "annotations.xml").write_text('<?xml version="1.0" encoding="utf-8"?>\n<annotations><version>1.1</version>'
                                         '<meta><task><id>1</id><name>t</name><size>2</size><mode>annotation</mode>'
                                         f'</task></meta>{"".join(images)}</annotations>')


def test_cvat_xml_skeletons_boxes_polygons_masks(tmp_path):
    scenes = [make_scene(i) for i in range(2)]
    write_cvat_xml(tmp_path / "src", scenes)
    result = convert("cvat", tmp_path / "src", tmp_path / "out")
    check_output(tmp_path / "out", "train", scenes)
    assert result.keypoints.unmatched == {} and result.classes.unmatched == {"hat": 2}
    problems = [str(p) for p in result.problems.problems]
    assert problems == [f"{tmp_path / 'src' / 'annotations.xml'}: image {k} ({s.name}), <polyline> 1 ('line'): "
                        "shape: polyline shapes are not converted" for k, s in enumerate(scenes)]


def test_custom_class_set_and_renamed_labels(tmp_path):
    scenes = [make_scene(0)]
    write_cvat_xml(tmp_path / "src", scenes)
    result = convert("cvat", tmp_path / "src", tmp_path / "out", classes="background, torso, hair",
                     rename=["Face_Neck=hair"], unlabelled="ignore")
    classes = {"background": 0, "Torso": 1, "Face_Neck": 2, "Hair": 2}  # the tool's labels -> the new ids
    labels = cv2.imread(str(tmp_path / "out" / "train" / "labels" / "img0.png"), cv2.IMREAD_UNCHANGED)
    expected = expected_labels(scenes[0], classes=classes)
    np.testing.assert_array_equal(labels[expected != 0], expected[expected != 0])
    assert (labels[expected == 0] == 255).all()  # --unlabelled ignore
    assert result.classes.unmatched == {"Upper_Clothing": 1, "hat": 1}
    assert (tmp_path / "out" / "classes.txt").read_text() == "background\ntorso\nhair\n"
    assert '--data.num_classes 3 --data.class_names "[background, torso, hair]"' in summary(result)


def test_a_class_set_takes_the_tool_labels_of_its_merges_sources_by_name(tmp_path):
    """``--classes coarse``: Torso and Upper_Clothing paint Upper_Body, Face_Neck Head, Hair Hair; classes.txt is
    the set's, which ``--data.classes coarse`` then reads as its own ids."""
    scenes = [make_scene(0)]
    write_cvat_xml(tmp_path / "src", scenes)
    result = convert("cvat", tmp_path / "src", tmp_path / "out", classes="coarse")
    coarse = {"Torso": 3, "Upper_Clothing": 3, "Face_Neck": 1, "Hair": 2}
    labels = cv2.imread(str(tmp_path / "out" / "train" / "labels" / "img0.png"), cv2.IMREAD_UNCHANGED)
    np.testing.assert_array_equal(labels, expected_labels(scenes[0], classes=coarse))
    assert result.classes.unmatched == {"hat": 1} and result.classes.matched["Upper_Body"] == 2
    assert (tmp_path / "out" / "classes.txt").read_text().split()[:4] == ["Background", "Head", "Hair", "Upper_Body"]
    assert "--data.classes coarse" in summary(result)
    data = DenseTaskData("seg", root=str(tmp_path / "out"), classes="coarse", input_size=(64, 48))
    assert data.label_map(tmp_path / "out") == (8, None)  # written in the set's ids


def test_the_command_line_gives_convert_its_class_set_and_split(tmp_path, capsys):
    """The same conversion from the command line: ``--classes``, ``--rename``, ``--unlabelled`` and ``--split`` reach
    the writer (the labels as above, in the split named)."""
    scenes = [make_scene(0)]
    write_cvat_xml(tmp_path / "src", scenes)
    assert convert_main(["cvat", str(tmp_path / "src"), "--out", str(tmp_path / "out"), "--classes",
                         "background, torso, hair", "--rename", "Face_Neck=hair", "--unlabelled", "ignore",
                         "--split", "val"]) == 0
    assert sorted(p.name for p in (tmp_path / "out").iterdir() if p.is_dir()) == ["annotations", "val"]
    labels = cv2.imread(str(tmp_path / "out" / "val" / "labels" / "img0.png"), cv2.IMREAD_UNCHANGED)
    expected = expected_labels(scenes[0], classes={"background": 0, "Torso": 1, "Face_Neck": 2, "Hair": 2})
    np.testing.assert_array_equal(labels[expected != 0], expected[expected != 0])
    assert (labels[expected == 0] == 255).all()
    assert "val: 1 images" in capsys.readouterr().out


def test_cvat_xml_bad_record_names_the_file_image_and_shape(tmp_path):
    scenes = [make_scene(0)]
    write_cvat_xml(tmp_path / "src", scenes)
    xml = tmp_path / "src" / "annotations.xml"
    xml.write_text(xml.read_text().replace('xtl="5.00"', 'xtl="five"', 1).replace('rle="', 'rle="1, ', 1))
    result = convert("cvat", tmp_path / "src", tmp_path / "out")
    fatal = [str(p) for p in result.problems.fatal]
    assert fatal[0] == (f"{xml}: image 0 (img0.png), <box> 1 ('person'): xtl/ytl/xbr/ybr: finite numbers; the shape "
                        "is left out")
    assert fatal[1].startswith(f"{xml}: image 0 (img0.png), <mask> 1 ('Hair'): rle: run lengths over the mask's box")


def test_cvat_coco_keypoints_export_is_remapped_by_name(tmp_path):
    scenes = [make_scene(i) for i in range(2)]
    order = COCO17[::-1]  # the export's own keypoint order
    images, anns = [], []
    for k, scene in enumerate(scenes, 1):
        write_png(tmp_path / "src" / "images" / scene.name, scene.pixels)
        images.append({"id": k, "file_name": scene.name, "width": W, "height": H})
        for person in scene.people:
            flat = []
            for n in order:
                flat += list(person.keypoints.get(n, (0, 0, 0)))
            bbox = expected_box(person) if person.box is not None else [0, 0, 0, 0]  # CVAT: no box -> zeros
            anns.append({"id": len(anns) + 1, "image_id": k, "category_id": 1, "keypoints": flat, "bbox": bbox,
                         "num_keypoints": len(person.keypoints), "iscrowd": 0, "area": 0, "segmentation": []})
    (tmp_path / "src" / "annotations").mkdir()
    (tmp_path / "src" / "annotations" / "person_keypoints_default.json").write_text(json.dumps(
        {"licenses": [], "info": {}, "images": images, "annotations": anns,
         "categories": [{"id": 1, "name": "person", "supercategory": "", "keypoints": order, "skeleton": []}]}))
    result = convert("cvat", tmp_path / "src", tmp_path / "out")
    check_output(tmp_path / "out", "train", scenes, seg=False, polygons=False)
    assert not result.seg and not result.problems.problems


def voc_colour(index: int) -> tuple[int, int, int]:
    """Pascal VOC's palette (CVAT's default mask colours): the bits of the index spread over r, g, b."""
    r = g = b = 0
    for shift in range(8):
        r |= ((index >> 0) & 1) << (7 - shift)
        g |= ((index >> 1) & 1) << (7 - shift)
        b |= ((index >> 2) & 1) << (7 - shift)
        index >>= 3
    return r, g, b


def write_cvat_masks(src: Path, scenes: list[Scene], labels: list[str]) -> None:
    """A "Segmentation mask 1.1" export: labelmap.txt (``labels`` in Pascal VOC colours, background first),
    ImageSets/Segmentation/default.txt, SegmentationClass/ colour masks and JPEGImages/ (here lossless PNG)."""
    colours = {label: voc_colour(k) for k, label in enumerate(labels)}
    (src / "ImageSets" / "Segmentation").mkdir(parents=True)
    (src / "labelmap.txt").write_text("# label:color_rgb:parts:actions\n" + "".join(
        f"{label}:{','.join(map(str, colour))}::\n" for label, colour in colours.items()))
    (src / "ImageSets" / "Segmentation" / "default.txt").write_text("".join(f"{Path(s.name).stem}\n" for s in scenes))
    for scene in scenes:
        write_png(src / "JPEGImages" / scene.name, scene.pixels)
        mask = np.zeros((H, W, 3), np.uint8)
        mask[:] = colours["background"]
        for label, (x1, y1, x2, y2) in scene.rects:
            mask[y1:y2 + 1, x1:x2 + 1] = colours[label]
        label, (left, top), shape = scene.mask
        mask[top:top + shape.shape[0], left:left + shape.shape[1]][shape] = colours[label]
        write_png(src / "SegmentationClass" / f"{Path(scene.name).stem}.png", mask)


def test_cvat_segmentation_masks_give_the_labels_they_were_painted_from(tmp_path):
    scenes = [make_scene(i) for i in range(2)]
    write_cvat_masks(tmp_path / "src", scenes, ["background", "Torso", "Face_Neck", "Upper_Clothing", "hat", "Hair"])
    result = convert("cvat", tmp_path / "src", tmp_path / "out")
    for scene in scenes:
        labels = cv2.imread(str(tmp_path / "out" / "train" / "labels" / f"{Path(scene.name).stem}.png"),
                            cv2.IMREAD_UNCHANGED)
        np.testing.assert_array_equal(labels, expected_labels(scene))  # hat: no such class, 255
        copied = cv2.cvtColor(cv2.imread(str(tmp_path / "out" / "train" / "images" / scene.name)), cv2.COLOR_BGR2RGB)
        np.testing.assert_array_equal(copied, scene.pixels)
    assert result.seg and not result.pose and result.classes.unmatched == {"hat": 2}
    assert not result.problems.problems and not result.check.problems, result.check.format()
    # A colour labelmap.txt does not list is named and left unlabelled.
    mask_file = tmp_path / "src" / "SegmentationClass" / "img0.png"
    mask = cv2.imread(str(mask_file))
    mask[:3, :4] = (1, 2, 3)  # BGR
    cv2.imwrite(str(mask_file), mask)
    again = convert("cvat", tmp_path / "src", tmp_path / "again")
    assert [str(p) for p in again.problems.problems] == [
        f"{mask_file}: image img0 (default): colour: 12 pixels of colour 3,2,1, which labelmap.txt does not list; "
        "they are left unlabelled (255)"]
    labels = cv2.imread(str(tmp_path / "again" / "train" / "labels" / "img0.png"), cv2.IMREAD_UNCHANGED)
    assert (labels[:3, :4] == 255).all()


def column_rle(mask: np.ndarray) -> list[int]:
    """COCO's uncompressed RLE: run lengths over the mask in column-major order, background first."""
    return run_lengths(mask.T.reshape(-1))


def test_cvat_coco_instances_polygons_and_rle_masks_give_the_same_labels(tmp_path):
    scenes = [make_scene(i) for i in range(2)]
    names = ["Torso", "Face_Neck", "Upper_Clothing", "hat", "Hair"]
    images, anns = [], []
    for k, scene in enumerate(scenes, 1):
        write_png(tmp_path / "src" / "images" / scene.name, scene.pixels)
        images.append({"id": k, "file_name": scene.name, "width": W, "height": H})
        for label, r in scene.rects:
            polygon = [float(v) for corner in rect_points(*r) for v in corner]
            anns.append({"id": len(anns) + 1, "image_id": k, "category_id": names.index(label) + 1, "iscrowd": 0,
                         "segmentation": [polygon], "bbox": [r[0], r[1], r[2] - r[0], r[3] - r[1]], "area": 0})
        label, (left, top), shape = scene.mask
        full = np.zeros((H, W), bool)
        full[top:top + shape.shape[0], left:left + shape.shape[1]] = shape
        anns.append({"id": len(anns) + 1, "image_id": k, "category_id": names.index(label) + 1, "iscrowd": 1,
                     "segmentation": {"counts": column_rle(full), "size": [H, W]}, "bbox": [0, 0, 1, 1], "area": 0})
    (tmp_path / "src" / "annotations").mkdir()
    (tmp_path / "src" / "annotations" / "instances_default.json").write_text(json.dumps(
        {"licenses": [], "info": {}, "images": images, "annotations": anns,
         "categories": [{"id": i + 1, "name": n, "supercategory": ""} for i, n in enumerate(names)]}))
    result = convert("cvat", tmp_path / "src", tmp_path / "out")
    for scene in scenes:
        labels = cv2.imread(str(tmp_path / "out" / "train" / "labels" / f"{Path(scene.name).stem}.png"),
                            cv2.IMREAD_UNCHANGED)
        np.testing.assert_array_equal(labels, expected_labels(scene))
    assert result.seg and not result.pose and not result.problems.problems


# ---- Label Studio ---------------------------------------------------------------------------------------------

def write_label_studio(src: Path, scenes: list[Scene]) -> Path:
    tasks = []
    for t, scene in enumerate(scenes, 1):
        url = f"/data/upload/1/{t:08x}-{scene.name}"
        if t % 2:  # uploads keep their hash prefix on disk (media/upload/1/); a copied-out image may not
            scene.name = f"{t:08x}-{scene.name}"
        write_png(src / "media" / "upload" / "1" / scene.name, scene.pixels)
        result = []

        def region(kind, value, rid):
            result.append({"id": rid, "type": kind, "value": value, "from_name": kind, "to_name": "image",
                           "original_width": W, "original_height": H, "image_rotation": 0})

        for g, person in enumerate(scene.people):
            parent = None
            if person.box is not None:
                x1, y1, x2, y2 = person.box
                parent = f"box{g}"
                region("rectanglelabels", {"x": x1 / W * 100, "y": y1 / H * 100, "width": (x2 - x1) / W * 100,
                                           "height": (y2 - y1) / H * 100, "rotation": 0,
                                           "rectanglelabels": ["person"]}, parent)
            for k, (n, (x, y, _)) in enumerate(person.keypoints.items()):
                rid = f"kp{g}_{k}"
                region("keypointlabels", {"x": x / W * 100, "y": y / H * 100, "width": 0.5,
                                          "keypointlabels": [n]}, rid)
                if parent:
                    result[-1]["parentID"] = parent
                elif k:
                    result.append({"type": "relation", "from_id": f"kp{g}_0", "to_id": rid, "direction": "right"})
        for k, (label, r) in enumerate(scene.rects):
            region("polygonlabels", {"points": [[x / W * 100, y / H * 100] for x, y in rect_points(*r)],
                                     "polygonlabels": [label], "closed": True}, f"poly{k}")
            owner = next((g for g, p in enumerate(scene.people) if p.polygon == label), None)
            if owner is not None:
                result.append({"type": "relation", "from_id": f"kp{owner}_0", "to_id": f"poly{k}"})
        tasks.append({"id": t, "data": {"image": url},
                      "annotations": [{"id": 100 + t, "result": result, "was_cancelled": False}], "predictions": []})
    path = src / "project-1-at-2026-12-01.json"
    path.write_text(json.dumps(tasks))
    return path


def test_label_studio_percent_coordinates_and_relations(tmp_path):
    scenes = [make_scene(i) for i in range(2)]
    write_label_studio(tmp_path / "src", scenes)
    result = convert("label-studio", tmp_path / "src", tmp_path / "out")
    check_output(tmp_path / "out", "train", scenes, occlusion=False, with_mask=False)
    assert not result.problems.problems and result.classes.unmatched == {"hat": 2}


def test_label_studio_bad_region_names_the_file_and_task(tmp_path):
    export = write_label_studio(tmp_path / "src", [make_scene(0)])
    tasks = json.loads(export.read_text())
    tasks[0]["annotations"][0]["result"][1]["value"]["x"] = None
    tasks.append({"id": 7, "data": {"image": "/data/upload/1/missing.png"}, "annotations": []})
    export.write_text(json.dumps(tasks))
    result = convert("label-studio", tmp_path / "src", tmp_path / "out")
    fatal = [str(p) for p in result.problems.fatal]
    assert fatal[0].startswith(f"{export}: task 1, result kp0_0 (keypointlabels ['nose']): value: a label and")
    assert fatal[1] == f"{export}: task 7: data: image file not found under the export folder: missing.png"


def test_label_studio_rotated_box_becomes_its_extent():
    from sapiens2_ft.convert.label_studio import _value_points

    # 24 x 16 px at (12, 16), turned 90 degrees clockwise (y down) about its top-left corner
    value = {"x": 10, "y": 10, "width": 20, "height": 10, "rotation": 90}
    np.testing.assert_allclose(_value_points("box", value, (W, H)) * [W, H], [[-4, 16], [12, 40]], atol=1e-9)
    assert _value_points("box", value, None) is None  # a rotated box needs the image size


# ---- YOLO-pose ------------------------------------------------------------------------------------------------

def xyxy(box):
    x, y, w, h = box
    return (x, y, x + w, y + h)


def write_yolo(src: Path, splits: dict[str, list[Scene]]) -> None:
    for split, scenes in splits.items():
        for scene in scenes:
            write_png(src / "images" / split / scene.name, scene.pixels)
            rows = []
            for person in scene.people:
                x1, y1, w, h = expected_box(person, scene)
                values = [(x1 + w / 2) / W, (y1 + h / 2) / H, w / W, h / H]
                for n in COCO17:
                    x, y, v = person.keypoints.get(n, (0, 0, 0))
                    values += [x / W, y / H, v]
                rows.append("0 " + " ".join(f"{v:.9f}" for v in values))
            (src / "labels" / split).mkdir(parents=True, exist_ok=True)
            (src / "labels" / split / f"{Path(scene.name).stem}.txt").write_text("\n".join(rows) + "\n")
    flip = list(load_metainfo("coco17").flip_indices)
    (src / "data.yaml").write_text(yaml.safe_dump({"path": ".", "train": "images/train", "val": "images/val",
                                                   "kpt_shape": [17, 3], "flip_idx": flip,
                                                   "names": {0: "person"}}))


@pytest.fixture(scope="module")
def yolo_result(tmp_path_factory):
    src, out = tmp_path_factory.mktemp("yolo"), tmp_path_factory.mktemp("yolo_out") / "data"
    splits = {"train": [make_scene(0), make_scene(1)], "val": [make_scene(2)]}
    write_yolo(src, splits)
    return splits, src, out, convert("yolo-pose", src, out)


def test_yolo_pose_keeps_its_splits(yolo_result):
    splits, _, out, result = yolo_result
    for split, scenes in splits.items():
        # YOLO rows always carry a box: the scene's, or the extent the test derives
        boxed = [Scene(s.name, [Person(p.keypoints, xyxy(expected_box(p, s))) for p in s.people], s.rects, s.mask,
                       s.pixels) for s in scenes]
        check_output(out, split, boxed, seg=False)
    assert not result.seg and not result.problems.problems
    assert not (out / "train" / "labels").exists()
    assert not PoseDataModule(root=str(out)).check().problems  # its default paths: what check_data runs


def test_yolo_pose_errors(yolo_result, tmp_path):
    _, src, _, _ = yolo_result
    with pytest.raises(ConvertError, match=r"data.yaml: kpt_shape has 17 keypoints, the keypoint set "
                                           r"'coco_wholebody' has 133"):
        convert("yolo-pose", src, tmp_path / "a", keypoints="coco_wholebody")
    label = src / "labels" / "train" / "img0.txt"
    good = label.read_text()
    try:
        label.write_text(good + "0 0.5 0.5 0.1\n")
        data = yaml.safe_load((src / "data.yaml").read_text())
        data["flip_idx"][1], data["flip_idx"][2] = 1, 2  # left_eye / right_eye not swapped
        (src / "data.yaml").write_text(yaml.safe_dump(data))
        result = convert("yolo-pose", src, tmp_path / "b")
    finally:
        label.write_text(good)
    problems = [str(p) for p in result.problems.problems]
    assert f"{label}: row 3: values: 56 numbers (class cx cy w h + 17 keypoints x 3), got 4" in problems[1]
    assert problems[0].startswith(f"{src / 'data.yaml'}: -: flip_idx: differs from the flip pairs of 'coco17' at "
                                  "left_eye->left_eye (set: right_eye)")


def test_ungrouped_keypoints_join_the_person_whose_box_holds_them(tmp_path):
    point = lambda label, x, y: Shape("point", label, f"point {label}", np.array([[x, y]]))  # noqa: E731
    shapes = [Shape("box", "person", "box A", np.array([[0, 0], [10, 10]])),
              Shape("box", "person", "box B", np.array([[20, 0], [30, 10]])),
              point("nose", 5, 5), point("nose", 25, 5), point("left_eye", 15, 5), point("right_eye", 9, 9),
              Shape("point", "left_eye", "grouped", np.array([[1, 1]]), group="group_id 1")]
    report = DataReport()
    people = people_from_shapes(shapes, tmp_path / "a.json", "image 3", report)
    assert [(p.where, p.box, p.keypoints) for p in people] == [
        ("box A", (0, 0, 10, 10), {"nose": (5, 5, 2), "right_eye": (9, 9, 2)}),
        ("box B", (20, 0, 30, 10), {"nose": (25, 5, 2)}),
        ("group_id 1", None, {"left_eye": (1, 1, 2)})]
    assert [str(p) for p in report.problems] == [
        f"{tmp_path / 'a.json'}: image 3, point left_eye: group: keypoint 'left_eye' belongs to no single person "
        "(inside no person's box; tie it with a group)"]


# ---- training on converted data -------------------------------------------------------------------------------

@pytest.mark.slow  # a training run: the fast tier keeps this file's unit tests
def test_converted_pose_and_seg_data_train_two_steps(yolo_result, labelme_result, tiny_pose308_dir, tmp_path):
    from sapiens2_ft.training.cli import main

    _, _, pose_root, _ = yolo_result
    pose = main(pose_run_args(pose_root, tiny_pose308_dir, tmp_path / "pose", 2, "--data.train_ann",
                              "annotations/train.json", "--data.train_images", "train/images", "--data.val_ann",
                              "annotations/val.json", "--data.val_images", "val/images", "--tracking.logger", "csv",
                              "--export", "false", "--trainer.num_sanity_val_steps", "0"))
    assert pose["global_step"] == 2 and np.isfinite(pose["metrics"]["AP"])
    _, seg_root, _ = labelme_result
    seg = main(["--config", "seg_custom.yaml", "--run_dir", str(tmp_path / "seg"), "--model.pretrained", "null",
                "--model.size", "tiny", "--data.root", str(seg_root), "--data.input_size", "[128, 96]",
                "--data.batch_size", "2", "--data.num_workers", "0", "--trainer.max_steps", "2",
                "--trainer.val_check_interval", "2", "--trainer.accelerator", "cpu", "--trainer.devices", "1",
                "--trainer.enable_progress_bar", "false", "--tracking.logger", "csv", "--export", "false",
                "--trainer.num_sanity_val_steps", "0"])
    assert seg["global_step"] == 2 and all(np.isfinite(v) for v in seg["metrics"].values())
