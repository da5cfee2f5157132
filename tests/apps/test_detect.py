"""Pose on photos without a boxes file: a person detector or a seg model finds the people, ``predict`` crops them
(batched across images), and ``detect`` writes the boxes the COCO protocol validates with."""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest
import torch

from datamodules.body_parts import HEAD_PARTS, SAPIENS2_PART_CLASSES
from datamodules.coco_keypoints import load_detections
from datamodules.boundary.images import read_image
from datamodules.keypoints.metainfo import load_metainfo
from sapiens2_ft import detect, predict
from sapiens2_ft.models.detector import PersonDetector
from sapiens2_ft.predict.loading import load_inference
from sapiens2_ft.tasks.seg.boxes import boxes_from_foreground

VAL_ANN = "annotations/person_keypoints_val2017.json"


def digest(image: np.ndarray) -> str:
    return hashlib.sha1(image.tobytes()).hexdigest()


@pytest.fixture()
def stub_detector(tiny_coco, monkeypatch):
    """A detector that returns the ground-truth boxes (score 1) of each tiny_coco val image, recognised by its
    pixels: checks the boxes -> crops -> keypoints path with known boxes."""
    coco = json.loads((tiny_coco / VAL_ANN).read_text())
    by_pixels = {}
    for image in coco["images"]:
        boxes = [[*a["bbox"], 1.0] for a in coco["annotations"] if a["image_id"] == image["id"]]
        by_pixels[digest(read_image(str(tiny_coco / "val2017" / image["file_name"])))] = np.array(boxes)
    calls = []

    class Stub:
        def __init__(self, source, threshold, nms_iou, device):
            calls.append(source)

        def __call__(self, images):
            calls.append(len(images))
            return [by_pixels[digest(image)] for image in images]

    monkeypatch.setattr("sapiens2_ft.predict.boxes.PersonDetector", Stub)
    return calls


def keypoints(out) -> list:
    return sorted((r["image_id"], r["bbox"], r["keypoints"], r["score"])
                  for r in json.loads((out / "keypoints.json").read_text()))


def test_detected_boxes_give_the_results_of_the_same_boxes_from_a_file(pose_run, tiny_coco, stub_detector, tmp_path):
    model, images = str(pose_run[0] / "export"), str(tiny_coco / "val2017")
    from_file = predict.main(["--model", model, "--input", images, "--out", str(tmp_path / "file"),
                              "--boxes", str(tiny_coco / VAL_ANN), "--batch_size", "3"])
    detected = predict.main(["--model", model, "--input", images, "--out", str(tmp_path / "det"),
                             "--detector", "stub", "--batch_size", "3"])
    assert stub_detector == ["stub", 2]  # both images in one detector call
    expected, found = keypoints(from_file), keypoints(detected)
    assert len(found) == 4 and [r[:2] for r in found] == [r[:2] for r in expected]
    for (*_, points, score), (*_, points_file, score_file) in zip(found, expected):
        assert np.allclose(points, points_file, atol=0.01) and score == pytest.approx(score_file, abs=1e-4)
    # One crop per forward pass gives the same keypoints: batching across images changes nothing.
    one_by_one = predict.main(["--model", model, "--input", images, "--out", str(tmp_path / "single"),
                               "--detector", "stub", "--batch_size", "1"])
    for a, b in zip(keypoints(one_by_one), found):
        assert np.allclose(a[2], b[2], atol=0.05)


def test_predict_runs_a_real_detector_end_to_end(pose_run, tiny_coco, tiny_detector_dir, tmp_path):
    images = [read_image(str(p)) for p in sorted((tiny_coco / "val2017").iterdir())]
    expected = PersonDetector(str(tiny_detector_dir), threshold=0.005, nms_iou=0.6)(images)
    out = predict.main(["--model", str(pose_run[0] / "export"), "--input", str(tiny_coco / "val2017"),
                        "--out", str(tmp_path / "out"), "--detector", str(tiny_detector_dir),
                        "--det_threshold", "0.005"])
    results = json.loads((out / "keypoints.json").read_text())
    assert len(results) == sum(len(b) for b in expected) > 0
    assert sorted(r["bbox"] for r in results) == sorted(np.round(b[:4], 2).tolist() for e in expected for b in e)


def test_boxes_from_seg_crop_each_foreground_region(pose_run, seg_checkpoint, tiny_coco, tmp_path):
    out = predict.main(["--model", str(pose_run[0] / "export"), "--input", str(tiny_coco / "val2017"),
                        "--out", str(tmp_path / "out"), "--boxes_from_seg", str(seg_checkpoint),
                        "--seg_min_area", "0.0005", "--seg_box_pad", "0.1"])
    seg, _ = load_inference(str(seg_checkpoint), tmp_path / "seg")
    images = [read_image(str(p)) for p in sorted((tiny_coco / "val2017").iterdir())]
    expected = []
    for outputs in seg.image_outputs(images):
        probs = outputs["logits"].softmax(1)[0].detach()
        heads = torch.isin(probs.argmax(0), torch.tensor([SAPIENS2_PART_CLASSES.index(n) for n in HEAD_PARTS]))
        expected += boxes_from_foreground((probs.argmax(0) > 0).numpy(), 0.0005, 0.1, (1 - probs[0]).numpy(),
                                          heads.numpy(), 0.002).tolist()
    results = json.loads((out / "keypoints.json").read_text())
    assert sorted(r["bbox"] for r in results) == sorted(np.round(b[:4], 2).tolist() for b in expected)


def test_a_seg_model_giving_boxes_and_maps_runs_once(pose_run, seg_checkpoint, tiny_coco, tmp_path, monkeypatch):
    """``--model S --boxes_from_seg S``: one seg forward per chunk, the same boxes as ``--boxes_from_seg`` alone."""
    from sapiens2_ft.tasks.seg.inference import SegmentationInference

    calls = []
    real = SegmentationInference.image_outputs

    def counted(inference, images, *rest):  # the maps of --model and of --boxes_from_seg
        calls.append(type(inference).__name__)
        return real(inference, images, *rest)

    monkeypatch.setattr(SegmentationInference, "image_outputs", counted)
    args = ["--input", str(tiny_coco / "val2017"), "--boxes_from_seg", str(seg_checkpoint), "--batch_size", "8"]
    both = predict.main(["--model", str(pose_run[0] / "export"), "--model", str(seg_checkpoint), *args,
                         "--out", str(tmp_path / "both")])
    assert calls == ["SegmentationInference"]  # the val folder's 2 images are one chunk
    alone = predict.main(["--model", str(pose_run[0] / "export"), *args, "--out", str(tmp_path / "alone")])
    boxes = [sorted(r["bbox"] for r in json.loads(path.read_text()))
             for path in (both / "pose" / "keypoints.json", alone / "keypoints.json")]
    assert boxes[0] == boxes[1] and boxes[0]


def test_box_options_are_checked(pose_run, seg_checkpoint, tiny_coco, tmp_path):
    base = ["--input", str(tiny_coco / "val2017"), "--out", str(tmp_path / "out")]
    pose = ["--model", str(pose_run[0] / "export"), *base]
    with pytest.raises(SystemExit, match="one of --boxes, --detector"):
        predict.main([*pose, "--boxes", str(tiny_coco / VAL_ANN), "--detector", "x/y"])
    with pytest.raises(SystemExit, match="is a pose model, which does not find people"):
        predict.main([*pose, "--boxes_from_seg", str(pose_run[0] / "export")])
    with pytest.raises(SystemExit, match="are for pose models"):
        predict.main(["--model", str(seg_checkpoint), *base, "--detector", "x/y"])
    with pytest.raises(SystemExit, match=r"(?s)--detector someone/missing: .*hf download someone/missing"):
        predict.main([*pose, "--detector", "someone/missing"])


def test_detect_writes_the_val_detections_the_data_module_validates_with(tiny_coco, stub_detector, tmp_path, capsys):
    out = detect.main(["--config", "pose_coco.yaml", "--data.root", str(tiny_coco), "--detector", "stub",
                       "--out", str(tmp_path / "dets.json")])
    printed = capsys.readouterr().out
    assert "4 person boxes in 2 images" in printed and "4 of 4 ground-truth people found" in printed
    instances, skipped = load_detections(out, tiny_coco / VAL_ANN, tiny_coco / "val2017", load_metainfo("coco17"))
    gt = json.loads((tiny_coco / VAL_ANN).read_text())["annotations"]
    assert np.allclose(sorted(i.bbox for i in instances), sorted(a["bbox"] for a in gt), atol=0.005)
    assert not skipped


def test_people_boxes_split_touching_people_at_their_heads_unless_asked_not_to():
    from sapiens2_ft.predict.boxes import PeopleBoxes

    class TwoPeople:  # a model that sees two people side by side, bodies touching, heads apart
        def people(self, outputs):
            foreground = torch.zeros(60, 60, dtype=torch.bool)
            foreground[20:60, 5:55] = True
            foreground[5:20, 10:20] = foreground[5:20, 40:50] = True
            return foreground, foreground.float()

        def people_heads(self, outputs):
            heads = torch.zeros(60, 60, dtype=torch.bool)
            heads[5:20, 10:20] = heads[5:20, 40:50] = True
            return heads

    assert len(PeopleBoxes(TwoPeople(), 0.001, 0.0).from_outputs([{}])[0]) == 2
    assert len(PeopleBoxes(TwoPeople(), 0.001, 0.0, split_heads=False).from_outputs([{}])[0]) == 1
    assert len(PeopleBoxes(TwoPeople(), 0.001, 0.0, head_area=0.05).from_outputs([{}])[0]) == 1  # heads of 0.042


def test_every_box_option_reaches_its_box_source(seg_checkpoint, tiny_coco, tiny_detector_dir, tmp_path):
    """predict's box options, parsed as the command line gives them, reach the box source: the seg options give
    the boxes of ``PeopleBoxes`` built with the same values, which differ from the defaults' (so a value left unused
    shows); the detector is built with the threshold and NMS IoU given."""
    from sapiens2_ft.predict.boxes import PeopleBoxes, box_source
    from sapiens2_ft.predict.cli import parser as predict_parser

    keys = sorted(p.name for p in (tiny_coco / "val2017").iterdir())
    images = [read_image(str(tiny_coco / "val2017" / k)) for k in keys]
    seg, _ = load_inference(str(seg_checkpoint), tmp_path / "seg")

    def source(*argv):
        args = predict_parser().parse_args(["--model", "m", "--input", "i", "--out", "o", "--device", "cpu", *argv])
        return box_source(args, tmp_path, {str(seg_checkpoint): (seg, "seg")})  # the seg model loaded once

    # The tiny detector's boxes never overlap (a grid of 10 x 13 px cells): NMS keeps them all whatever its IoU.
    detector = source("--detector", str(tiny_detector_dir), "--det_threshold", "0.2", "--nms_iou", "0.3").detector
    assert (detector.threshold, detector.nms_iou) == (0.2, 0.3)
    options = ["--boxes_from_seg", str(seg_checkpoint), "--seg_min_area", "0.0005", "--seg_box_pad", "0.1"]
    default = [b.tolist() for b in source(*options)(keys, images)]
    for argv, split, head_area in ((["--no-seg_split_heads"], False, 0.002), (["--seg_head_area", "0.01"], True, 0.01)):
        found = [b.tolist() for b in source(*options, *argv)(keys, images)]
        expected = PeopleBoxes(seg, 0.0005, 0.1, split_heads=split, head_area=head_area)(keys, images)
        assert found == [b.tolist() for b in expected] and found != default, argv
