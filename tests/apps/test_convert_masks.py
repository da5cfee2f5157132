"""Masks are kept as their export encodes them (CVAT run lengths, LabelMe PNG bytes, COCO RLE, a colour of a mask
file) and decoded one at a time as each image's label map is painted: memory follows one image, not the number of
masks (issue 58, case 7); a mask that does not decode then is a problem of its region; a mask's extent still gives
its person's box."""

from __future__ import annotations

import base64
import json
import os
import resource
import time
from pathlib import Path

import cv2
import numpy as np

import forked
from sapiens2_ft.convert import convert
from sapiens2_ft.convert.__main__ import main as convert_main
from test_convert import CLASS, cvat_rle, make_scene, write_labelme, write_png


def convert_in_a_fork(argv: list[str], report: str) -> None:
    """``python -m sapiens2_ft.convert ARGV`` with the address space capped 4 GiB above what the process holds (a
    conversion that holds every mask fails fast instead of swapping); its exit status, time and growth of peak
    resident memory to ``report``."""
    vm = int(Path("/proc/self/statm").read_text().split()[0]) * os.sysconf("SC_PAGE_SIZE")
    resource.setrlimit(resource.RLIMIT_AS, (vm + (4 << 30), resource.getrlimit(resource.RLIMIT_AS)[1]))
    before, start = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.perf_counter()
    try:
        code = convert_main(argv)
    except MemoryError:
        code = "MemoryError"
    Path(report).write_text(json.dumps({"code": code, "seconds": time.perf_counter() - start,
                                        "grown_mib": (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
                                        / 1024}))


def measured(argv: list[str], tmp_path: Path) -> tuple[dict, str]:
    """What :func:`convert_in_a_fork` measured, and what the command printed to stderr."""
    run = forked.Forked(convert_in_a_fork, (argv, str(tmp_path / "report.json")), tmp_path / "logs").wait(120)
    return json.loads((tmp_path / "report.json").read_text()), run.stderr


def band_masks(src: Path, side: int, bands: int) -> np.ndarray:
    """One ``side`` x ``side`` image with ``bands`` masks of its whole size, each labelling its own band of rows;
    the label map they paint."""
    write_png(src / "images" / "a.png", np.full((side, side, 3), 90, np.uint8))
    expected, tags = np.zeros((side, side), np.uint8), []
    for k in range(bands):
        label, top, bottom = ("Torso", "Hair")[k % 2], k * side // bands, (k + 1) * side // bands
        expected[top:bottom] = CLASS[label]
        rle = f"{top * side}, {(bottom - top) * side}, {(side - bottom) * side}"  # rows above, the band, below
        tags.append(f'<mask label="{label}" rle="{rle}" left="0" top="0" width="{side}" height="{side}" '
                    f'z_order="{k}"/>')
    (src / "annotations.xml").write_text(f'<annotations><image id="0" name="a.png" width="{side}" height="{side}">'
                                         f'{"".join(tags)}</image></annotations>')
    return expected


def test_masks_are_decoded_one_image_at_a_time(tmp_path):
    side, bands = 1000, 60  # each mask 1 MB decoded, all of them 60 MB
    expected = band_masks(tmp_path / "src", side, bands)
    report, stderr = measured(["cvat", str(tmp_path / "src"), "--out", str(tmp_path / "out")], tmp_path)
    assert report["code"] == 0, stderr[-2000:]
    labels = cv2.imread(str(tmp_path / "out" / "train" / "labels" / "a.png"), cv2.IMREAD_UNCHANGED)
    np.testing.assert_array_equal(labels, expected)
    assert report["grown_mib"] < 30, report  # a few images' worth (3 MB each), not every mask (60 MB)


def test_a_mask_that_does_not_decode_is_a_problem_of_its_region(tmp_path):
    scene = make_scene(0)
    doc = json.loads(write_labelme(tmp_path / "src", scene).read_text())
    png = base64.b64decode(doc["shapes"][-1]["mask"])
    broken = png[:33] + b"\x00\x00\x00\x10IDATnot zlib at all" + png[-12:]  # its header intact, its data not
    doc["shapes"][-1]["mask"] = base64.b64encode(broken).decode()
    (tmp_path / "src" / "img0.json").write_text(json.dumps(doc))
    result = convert("labelme", tmp_path / "src", tmp_path / "out")
    assert [(p.field, p.record) for p in result.problems.fatal] == [("mask", f"shapes[{len(doc['shapes']) - 1}] "
                                                                             "(mask 'Hair')")]
    assert result.problems.fatal[0].expected.startswith("a mask that decodes (cannot read image of the mask")
    labels = cv2.imread(str(tmp_path / "out" / "train" / "labels" / "img0.png"), cv2.IMREAD_UNCHANGED)
    assert (labels == CLASS["Torso"]).any() and not (labels == CLASS["Hair"]).any()  # the other regions painted


def test_a_mask_grouped_with_a_person_gives_its_box_when_decoded(tmp_path):
    write_png(tmp_path / "src" / "images" / "a.png", np.full((30, 40, 3), 90, np.uint8))
    mask = np.zeros((4, 6), bool)
    mask[1:3, 2:4] = True  # pixels (12..13, 9..10) of the image
    (tmp_path / "src" / "annotations.xml").write_text(
        '<annotations><image id="0" name="a.png" width="40" height="30">'
        '<points label="nose" points="5,5" group_id="1"/>'
        f'<mask label="Hair" rle="{cvat_rle(mask)}" left="10" top="8" width="6" height="4" group_id="1"/>'
        '<mask label="Hair" rle="0" left="1" top="1" width="-1" height="0"/></image></annotations>')
    result = convert("cvat", tmp_path / "src", tmp_path / "out")
    ann = json.loads((tmp_path / "out" / "annotations" / "train.json").read_text())["annotations"]
    assert [a["bbox"] for a in ann] == [[5.0, 5.0, 8.0, 5.0]]  # the keypoint and the mask's foreground
    assert [p.expected for p in result.problems.fatal] == ["a positive mask size, got -1x0; the shape is left out"]
