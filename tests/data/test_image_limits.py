"""Limits before decoding: an image's size is read from its header and one above the pixel limit is refused
undecoded (predict skips it by name, the other images run); OpenCV's errors are one file's problem; masks are no
larger than their image; a JSON file above the size limit is refused unread."""

from __future__ import annotations

import json
import shutil
import struct
import zlib
from pathlib import Path

import cv2
import numpy as np
import pytest

from datamodules.boundary.images import check_pixels, header_size, read_image
from datamodules.boundary.limits import MAX_JSON_ENV, MAX_PIXELS_ENV
from datamodules.coco_keypoints import read_coco
from datamodules.data_check import DataReport, check_dense
from datamodules.errors import DataError, RefusedInput
from sapiens2_ft.convert import convert
from sapiens2_ft.predict import cli as predict
from sapiens2_ft.tasks.dense_data import dense_targets


def png_bomb(path: Path, side: int, valid: bool = True) -> Path:
    """A 1-bit ``side`` x ``side`` PNG of zeros: 110 kB on disk for 30000, 2.7 GB decoded as RGB. ``valid=False``:
    the header alone, with no image data."""
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    data = b""
    if valid:
        rows, compress = bytes(1 + (side + 7) // 8) * 1000, zlib.compressobj(9)
        data = b"".join(compress.compress(rows) for _ in range(side // 1000)) + compress.flush()
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", side, side, 1, 0, 0, 0, 0))
                     + chunk(b"IDAT", data) + chunk(b"IEND", b""))
    return path


def test_the_size_is_read_from_the_header_of_every_kind():
    image = np.zeros((23, 37, 3), np.uint8)
    for suffix in (".png", ".jpg", ".bmp", ".webp", ".tiff"):
        assert header_size(cv2.imencode(suffix, image)[1].tobytes()) == (37, 23), suffix
    assert header_size(b"not an image") is None


def test_an_image_above_the_limit_is_refused_undecoded(tmp_path, monkeypatch, decoded):
    bomb = png_bomb(tmp_path / "bomb.png", 30000)
    assert bomb.stat().st_size < 200_000
    with pytest.raises(RefusedInput, match=r"bomb\.png: 30000x30000 pixels, above the limit of 100,000,000 \(raise "
                                           r"it with SAPIENS2_FT_MAX_IMAGE_PIXELS"):
        read_image(str(bomb))
    small = tmp_path / "small.png"
    cv2.imwrite(str(small), np.zeros((20, 10, 3), np.uint8))
    monkeypatch.setenv(MAX_PIXELS_ENV, "199")
    with pytest.raises(DataError, match="10x20 pixels, above the limit of 199"):
        read_image(str(small))
    assert decoded == []
    # above OpenCV's own limit (set from ours when it loaded): its error is this file's problem, not a crash
    monkeypatch.setenv(MAX_PIXELS_ENV, "1e10")
    with pytest.raises(DataError, match=r"cannot read image .*huge\.png: above OpenCV's own limit of 100,000,000 "):
        read_image(str(png_bomb(tmp_path / "huge.png", 50000, valid=False)))


def test_the_pixel_rule_is_one_function_the_decoder_and_the_web_demo_use():
    """``check_pixels``: above the limit (not at it) is a refusal naming the image."""
    check_pixels((100, 100), "at.png", 10_000)
    with pytest.raises(RefusedInput, match=r"^image above\.png: 100x101 pixels, above the limit of 10,000 "):
        check_pixels((100, 101), "above.png", 10_000)


def test_the_web_demo_refuses_a_photo_by_the_boundary_s_rule(tmp_path):
    """The demo's upload check words the boundary's rule for its page (its limit in megapixels, as pixels)."""
    from sapiens2_ft.app.service import DemoError, Limits, check_photo

    photo = tmp_path / "photo.png"
    cv2.imwrite(str(photo), np.zeros((100, 100, 3), np.uint8))
    check_photo(photo, Limits(max_megapixels=0.01))  # 10,000 pixels: at the limit
    with pytest.raises(DemoError, match=r"^photo\.png: 100 x 100 pixels \(0 megapixels\) is more than this demo "
                                        r"takes \(0\.0099\); send a smaller picture$"):
        check_photo(photo, Limits(max_megapixels=0.0099))


def test_predict_skips_an_oversized_image_by_name_and_predicts_the_others(seg_checkpoint, dense_root, tmp_path,
                                                                            capsys, decoded):
    images = tmp_path / "photos"
    images.mkdir()
    for source in sorted((dense_root / "val" / "images").iterdir())[:2]:
        shutil.copy(source, images / source.name)
    png_bomb(images / "bomb.png", 30000)
    out = predict.main(["--model", str(seg_checkpoint), "--input", str(images), "--out", str(tmp_path / "out")])
    captured = capsys.readouterr()
    assert "bomb.png: 30000x30000 pixels, above the limit" in captured.err
    assert captured.out.strip().splitlines()[-1].endswith("; 1 images skipped (unreadable or too large): bomb.png")
    assert sorted(p.name for p in out.glob("*_overlay.png")) == sorted(f"{p.stem}_overlay.png" for p in
                                                                       images.iterdir() if p.name != "bomb.png")
    assert max(h * w for h, w in decoded) < 10**6  # the bomb never reached the decoder


def test_predict_max_pixels_is_the_limit_an_image_is_skipped_above(seg_checkpoint, dense_root, tmp_path, capsys):
    images = tmp_path / "photos"
    images.mkdir()
    small = cv2.imread(str(sorted((dense_root / "val" / "images").iterdir())[0]))
    cv2.imwrite(str(images / "small.png"), small)
    cv2.imwrite(str(images / "large.png"), cv2.resize(small, None, fx=2, fy=2))
    out = predict.main(["--model", str(seg_checkpoint), "--input", str(images), "--out", str(tmp_path / "out"),
                        "--max_pixels", str(small.shape[0] * small.shape[1])])  # the small one's own size: kept
    assert capsys.readouterr().out.strip().splitlines()[-1].endswith("1 images skipped (unreadable or too large): "
                                                                     "large.png")
    assert [p.name for p in out.glob("*_overlay.png")] == ["small_overlay.png"]


def test_check_data_reports_an_oversized_image_and_checks_the_rest(dense_root, tmp_path):
    root = tmp_path / "data"
    shutil.copytree(dense_root / "val", root / "val")
    png_bomb(root / "val" / "images" / "bomb.png", 30000)
    shutil.copy(next((root / "val" / "labels").iterdir()), root / "val" / "labels" / "bomb.png")
    report = DataReport()
    check_dense(root, "val", dense_targets("seg"), 29, report)
    assert [(Path(p.file).name, p.field) for p in report.fatal] == [("bomb.png", "image")]
    assert "30000x30000 pixels, above the limit" in report.fatal[0].expected
    assert report.checked["val"]["images"] == len(list((root / "val" / "images").iterdir()))


def test_masks_are_no_larger_than_their_image(tmp_path, decoded):
    src = tmp_path / "export"
    (src / "images").mkdir(parents=True)
    cv2.imwrite(str(src / "images" / "a.png"), np.full((40, 30, 3), 90, np.uint8))
    (src / "annotations.xml").write_text(
        '<annotations><image id="0" name="a.png" width="30" height="40"><points label="nose" points="5,5"/>'
        '<mask label="hat" rle="900000000" left="0" top="0" width="30000" height="30000"/></image></annotations>')
    problems = convert("cvat", src, tmp_path / "cvat").problems.problems
    assert [p.expected for p in problems] == ["a mask no larger than its image (30x40), got 30000x30000; the shape "
                                              "is left out"]
    bomb = png_bomb(tmp_path / "mask.png", 30000)
    import base64

    (src / "annotations.xml").unlink()
    (src / "a.json").write_text(json.dumps({"imagePath": "images/a.png", "shapes": [
        {"label": "nose", "points": [[5, 5]], "shape_type": "point"},
        {"label": "hat", "points": [[0, 0], [29, 39]], "shape_type": "mask",
         "mask": base64.b64encode(bomb.read_bytes()).decode()}]}))
    problems = convert("labelme", src, tmp_path / "labelme").problems.problems
    assert [p.field for p in problems] == ["mask"] and "30000x30000 pixels, above the limit of 1,200" in \
        problems[0].expected
    assert max(h * w for h, w in decoded) <= 1200


def test_a_json_file_above_the_limit_is_refused_unread(tiny_coco, monkeypatch):
    ann = tiny_coco / "annotations" / "person_keypoints_val2017.json"
    monkeypatch.setenv(MAX_JSON_ENV, "1000")
    with pytest.raises(DataError, match=rf"{ann.name} is [\d,]+ bytes, above the limit of 1,000 for an annotation "
                                        rf"\(JSON, XML\) file "
                                        rf"\(raise it with {MAX_JSON_ENV}"):
        read_coco(ann)
