"""An export's budget (issue 58, case 7): what it declares is counted before anything is decoded, and one over its
budget is refused at once, naming the budget and how to raise it; realistic exports pass."""

from __future__ import annotations

import json
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from pycocotools import mask as mask_utils

from sapiens2_ft.convert import Budget, ConvertError, convert, cvat
from sapiens2_ft.convert.__main__ import main as convert_main
from sapiens2_ft.convert.budget import MIN_MASK_PIXELS
from sapiens2_ft.convert.masks import RunLengths
from test_convert import (column_rle, make_scene, write_cvat_masks, write_cvat_xml, write_label_studio, write_labelme,
                          write_png, write_yolo)
from test_convert_masks import measured


def png_header(path: Path, width: int, height: int) -> Path:
    """A PNG of its header alone: its size says ``width`` x ``height``; it does not decode."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 1, 0, 0, 0, 0))
                     + chunk(b"IEND", b""))
    return path


def hostile_cvat(src: Path, masks: int, side: int) -> Path:
    """A CVAT export of one image declared ``side`` x ``side``, with ``masks`` masks of all of it (one run each)."""
    png_header(src / "images" / "a.png", side, side)
    tags = "".join(f'<mask label="hat" rle="{side * side}" left="0" top="0" width="{side}" height="{side}"/>'
                   for _ in range(masks))
    (src / "annotations.xml").write_text(f'<annotations><image id="0" name="a.png" width="{side}" height="{side}">'
                                         f'<points label="nose" points="5,5"/>{tags}</image></annotations>')
    return src / "annotations.xml"


def test_a_small_xml_declaring_huge_masks_is_refused_before_decoding(tmp_path):
    xml = hostile_cvat(tmp_path / "src", 370, 10_000)  # 30 kB declaring 370 masks of 100 megapixels
    assert 25_000 < xml.stat().st_size < 35_000
    report, stderr = measured(["cvat", str(xml.parent), "--out", str(tmp_path / "out")], tmp_path)
    assert report["code"] == 2, stderr[-2000:]
    assert report["seconds"] < 0.5 and report["grown_mib"] < 50, report  # before: 1.5 GiB per 16 masks, ~0.5 s each
    assert (f"{xml}: the export declares 37,000,000,000 mask pixels (each mask costs its box to decode, however "
            "short its encoding) so far, above its budget of 3,0") in stderr
    assert "(100,000 per byte of its 30," in stderr and "raise it with --budget mask_pixels=N" in stderr
    assert not (tmp_path / "out").exists()


def test_refused_before_an_image_or_mask_is_read(tmp_path, monkeypatch):
    hostile_cvat(tmp_path / "src", 20, 1000)
    touched = []
    monkeypatch.setattr(RunLengths, "decode", lambda mask: touched.append(mask))
    monkeypatch.setattr(cvat, "file_size", lambda path: touched.append(path))
    with pytest.raises(ConvertError, match=r"declares 20,000,000 mask pixels .* above its budget of 10,000,000; "
                                           r"nothing was decoded or written\. .*--budget mask_pixels=N"):
        convert("cvat", tmp_path / "src", tmp_path / "out", budget=Budget(mask_pixels=10**7))
    assert touched == []
    convert("cvat", tmp_path / "src", tmp_path / "out", budget=Budget(mask_pixels=10**8))  # raised: it is read
    assert len(touched) == 1  # the image's header (it does not decode: no mask is painted)


@pytest.mark.parametrize("fmt", ["cvat", "cvat masks", "cvat coco", "labelme", "label-studio", "yolo-pose"])
def test_every_format_counts_against_each_budget(tmp_path, fmt):
    src, scenes = tmp_path / "src", [make_scene(0), make_scene(1)]
    if fmt == "cvat":
        write_cvat_xml(src, scenes)
    elif fmt == "cvat masks":
        write_cvat_masks(src, scenes, ["background", "Torso", "Face_Neck", "Upper_Clothing", "hat", "Hair"])
    elif fmt == "cvat coco":
        write_coco_masks(src, scenes)
    elif fmt == "labelme":
        for scene in scenes:
            write_labelme(src, scene)
    elif fmt == "label-studio":
        write_label_studio(src, scenes)
    else:
        write_yolo(src, {"train": scenes[:1], "val": scenes[1:]})
    keys = ["bytes", "shapes"] + ["points"] * (fmt != "cvat masks") + ["masks", "mask_pixels"] * (
        fmt not in ("label-studio", "yolo-pose"))
    for key in keys:
        with pytest.raises(ConvertError, match=rf"above its budget of 1; .* --budget {key}=N"):
            convert(fmt.split()[0], src, tmp_path / "out", budget=Budget(**{key: 1}))
    assert not (tmp_path / "out").exists()
    convert(fmt.split()[0], src, tmp_path / "out", budget=Budget(**{key: 10**9 for key in keys}))


def write_coco_masks(src: Path, scenes) -> None:
    """CVAT's "COCO 1.0" export of the scenes' masks (uncompressed RLE) and one polygon each."""
    images, anns = [], []
    for k, scene in enumerate(scenes, 1):
        write_png(src / "images" / scene.name, scene.pixels)
        images.append({"id": k, "file_name": scene.name, "width": 120, "height": 160})
        label, (left, top), shape = scene.mask
        full = np.zeros((160, 120), bool)
        full[top:top + shape.shape[0], left:left + shape.shape[1]] = shape
        anns.append({"id": 2 * k, "image_id": k, "category_id": 1, "iscrowd": 1,
                     "segmentation": {"counts": column_rle(full), "size": [160, 120]}})
        anns.append({"id": 2 * k + 1, "image_id": k, "category_id": 2, "segmentation": [[1, 1, 9, 1, 9, 9]]})
    (src / "annotations").mkdir(parents=True)
    (src / "annotations" / "instances_default.json").write_text(json.dumps(
        {"images": images, "annotations": anns, "categories": [{"id": 1, "name": "Hair"}, {"id": 2, "name": "Torso"}]}))


def test_the_budget_option(tmp_path, capsys):
    assert Budget.parse(["masks=2e6,mask_pixels=5e11", "shapes=10"]) == Budget(masks=2_000_000,
                                                                               mask_pixels=500_000_000_000, shapes=10)
    assert Budget.parse(None) == Budget()
    for bad in ("pixels=5", "masks=0", "masks", "shapes=-3", "points=many"):
        with pytest.raises(ConvertError, match=rf"--budget '{bad}': expected KEY=N with N a positive number"):
            Budget.parse([f"bytes=10,{bad}"])
    src = tmp_path / "src"
    write_cvat_xml(src, [make_scene(0)])
    assert convert_main(["cvat", str(src), "--out", str(tmp_path / "a"), "--budget", "masks=1e6", "pixels=1"]) == 2
    assert "--budget 'pixels=1': expected KEY=N" in capsys.readouterr().err
    assert convert_main(["cvat", str(src), "--out", str(tmp_path / "b"), "--budget", "shapes=3"]) == 2
    assert "raise it with --budget shapes=N" in capsys.readouterr().err and not (tmp_path / "b").exists()
    assert convert_main(["cvat", str(src), "--out", str(tmp_path / "c"), "--budget", "shapes=1e3,masks=9"]) == 0
    assert "--budget" not in capsys.readouterr().err


def test_a_realistic_coco_export_passes_the_default_budget(tmp_path):
    """300 images of 1920 x 1080 with 20 instance masks each (a person's outline as COCO RLE): 6,000 masks
    declaring 12 billion pixels, far above the 1 billion every export may declare, within 100,000 a byte."""
    yy, xx = np.mgrid[:1080, :1920]
    person = ((xx - 900) / 150) ** 2 + ((yy - 540) / 350) ** 2 < 1
    counts = mask_utils.encode(np.asfortranarray(person.astype(np.uint8)))["counts"].decode()
    images, anns = [], []
    for k in range(300):
        png_header(tmp_path / "src" / "images" / f"{k}.png", 1920, 1080)  # read for its size; not decoded here
        images.append({"id": k, "file_name": f"{k}.png", "width": 1920, "height": 1080})
        anns += [{"id": len(anns), "image_id": k, "category_id": 1, "iscrowd": 0, "bbox": [750, 190, 300, 700],
                  "area": 164_000, "segmentation": {"counts": counts, "size": [1080, 1920]}} for _ in range(20)]
    (tmp_path / "src" / "annotations").mkdir()
    export = tmp_path / "src" / "annotations" / "instances_default.json"
    export.write_text(json.dumps({"images": images, "annotations": anns, "categories": [{"id": 1, "name": "Hair"}]}))
    assert len(anns) * 1920 * 1080 > 10 * MIN_MASK_PIXELS
    result = convert("cvat", tmp_path / "src", tmp_path / "out")
    assert len(result.skipped_images) == 300  # past the budget: the images (headers alone) are what fails
