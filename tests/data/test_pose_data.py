"""COCO keypoints -> top-down samples: shapes, exact inverse mapping, skipped records, clear data errors."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import write_coco

from datamodules.coco_keypoints import load_detections, load_instances
from datamodules.errors import DataError
from datamodules.boundary.images import read_image
from datamodules.keypoints.metainfo import load_metainfo
from datamodules.pose_datamodule import PoseDataModule
from datamodules.pose_dataset import TopdownPoseDataset
from datamodules.transforms import affine

TRAIN_ANN = "annotations/person_keypoints_train2017.json"
VAL_ANN = "annotations/person_keypoints_val2017.json"


def _datamodule(root: Path, **kwargs) -> PoseDataModule:
    return PoseDataModule(root=str(root), train_ann=TRAIN_ANN, train_images="train2017", val_ann=VAL_ANN,
                          val_images="val2017", num_workers=0, batch_size=4, **kwargs)


@pytest.fixture(scope="module")
def coco_dm(tiny_coco) -> PoseDataModule:
    dm = _datamodule(tiny_coco)
    dm.setup("fit")
    return dm


def test_sample_shapes_and_dtypes(coco_dm):
    assert len(coco_dm.train_set) == 8 and len(coco_dm.val_set) == 4  # 4 + 2 images, 2 people each
    assert coco_dm.skipped == {"train": {}, "val": {}}
    for sample in (coco_dm.train_set[0], coco_dm.val_set[3]):
        assert sample["image"].dtype == torch.uint8 and sample["image"].shape == (3, 256, 192)
        assert sample["image"].is_contiguous()
        assert sample["keypoints"].dtype == torch.float32 and sample["keypoints"].shape == (17, 2)
        assert sample["keypoint_weights"].dtype == torch.float32 and sample["keypoint_weights"].shape == (17,)
        assert sample["inverse_affine"].dtype == torch.float32 and sample["inverse_affine"].shape == (2, 3)
        assert isinstance(sample["image_id"], int) and sample["box_score"] == 1.0 and sample["area"] > 0
    assert coco_dm.val_set[3]["index"] == 3
    batch = next(iter(coco_dm.train_dataloader()))
    assert batch["image"].shape == (4, 3, 256, 192) and batch["image"].dtype == torch.uint8
    assert batch["keypoints"].shape == (4, 17, 2) and batch["inverse_affine"].shape == (4, 2, 3)


def test_val_keypoints_map_back_to_annotations(coco_dm, tiny_coco):
    anns = json.loads((tiny_coco / VAL_ANN).read_text())["annotations"]
    assert len(anns) == len(coco_dm.val_set)
    for i, ann in enumerate(anns):
        sample = coco_dm.val_set[i]
        assert sample["image_id"] == ann["image_id"]
        expected = np.asarray(ann["keypoints"], np.float64).reshape(17, 3)
        back = affine.transform_points(sample["keypoints"].double().numpy(), sample["inverse_affine"].double().numpy())
        assert np.abs(back - expected[:, :2]).max() < 0.01
        assert torch.equal(sample["keypoint_weights"], torch.ones(17))
        # The val crop is the padded annotation box: its centre on the crop centre, its padded size (x 1.25, the
        # short side grown to W / H = 0.75) between the crop's first and last pixel centres (UDP).
        x, y, w, h = ann["bbox"]
        assert sample["area"] == pytest.approx(w * h)
        inverse = sample["inverse_affine"].double().numpy()
        height, width = sample["image"].shape[-2:]
        centre = affine.transform_points(np.array([(width - 1) / 2, (height - 1) / 2]), inverse)
        np.testing.assert_allclose(centre, [x + w / 2, y + h / 2], atol=1e-3)
        padded_w, padded_h = max(1.25 * w, 1.25 * h * width / height), max(1.25 * h, 1.25 * w * height / width)
        corners = affine.transform_points(np.array([[0.0, 0.0], [width - 1, height - 1]]), inverse)
        np.testing.assert_allclose(corners[1] - corners[0], [padded_w, padded_h], rtol=1e-5)


def test_records_in_another_order_give_the_same_samples(coco_dm, tiny_coco, tmp_path):
    """The jsons' images and annotations listed in reverse: the same training instances and validation samples,
    each found by its annotation id (ids, images and crops follow the records, not their place in the file)."""
    root = tmp_path / "coco"
    for folder in ("train2017", "val2017"):
        shutil.copytree(tiny_coco / folder, root / folder)
    (root / "annotations").mkdir()
    for ann in (TRAIN_ANN, VAL_ANN):
        data = json.loads((tiny_coco / ann).read_text())
        data["images"].reverse()
        data["annotations"].reverse()
        (root / ann).write_text(json.dumps(data))
    reordered = _datamodule(root)
    reordered.setup("fit")
    for split in ("train_set", "val_set"):
        ours, theirs = getattr(coco_dm, split), getattr(reordered, split)
        by_id = {a.annotation_id: i for i, a in enumerate(theirs.instances)}
        assert sorted(by_id) == sorted(a.annotation_id for a in ours.instances) and len(by_id) == len(ours)
        assert [a.annotation_id for a in ours.instances] != [a.annotation_id for a in theirs.instances]
        for i, a in enumerate(ours.instances):
            b = theirs.instances[by_id[a.annotation_id]]
            assert (Path(a.image_path).name, a.bbox) == (Path(b.image_path).name, b.bbox)
            assert np.array_equal(a.keypoints, b.keypoints) and np.array_equal(a.visibility, b.visibility)
            if split == "val_set":
                x, y = ours[i], theirs[by_id[a.annotation_id]]
                assert x["image_id"] == y["image_id"] and torch.equal(x["image"], y["image"])
                assert torch.equal(x["keypoints"], y["keypoints"])


def test_val_is_deterministic_and_train_is_augmented(coco_dm):
    a, b = coco_dm.val_set[0], coco_dm.val_set[0]
    assert torch.equal(a["image"], b["image"]) and torch.equal(a["keypoints"], b["keypoints"])
    draws = [coco_dm.train_set[0]["keypoints"] for _ in range(4)]
    assert any(not torch.allclose(draws[0], d) for d in draws[1:])


def _edit(ann_file: Path, edit) -> None:
    data = json.loads(ann_file.read_text())
    edit(data)
    ann_file.write_text(json.dumps(data))


@pytest.fixture
def small_coco(tmp_path) -> Path:
    """A fresh dataset per test, safe to break: 3 train images (6 people), 1 val image (2 people)."""
    write_coco(tmp_path, "train2017", "person_keypoints_train2017.json", num_images=3, seed=5)
    write_coco(tmp_path, "val2017", "person_keypoints_val2017.json", num_images=1, seed=6)
    return tmp_path


def test_crowd_and_unlabelled_instances_are_skipped_and_counted(small_coco):
    def edit(data):
        data["annotations"][0]["iscrowd"] = 1
        kpts = data["annotations"][3]["keypoints"]
        kpts[2::3] = [0.0] * 17
        data["annotations"][3]["num_keypoints"] = 0

    _edit(small_coco / TRAIN_ANN, edit)
    dm = _datamodule(small_coco)
    dm.setup("fit")
    assert len(dm.train_set) == 4
    assert dm.skipped["train"] == {"crowd": 1, "too few keypoints": 1}
    assert {inst.annotation_id for inst in dm.train_set.instances} == {2, 3, 5, 6}


def test_min_keypoints(small_coco):
    def edit(data):
        data["annotations"][1]["keypoints"][2:30:3] = [0.0] * 10  # first 10 keypoints unlabelled

    _edit(small_coco / TRAIN_ANN, edit)
    meta = load_metainfo("coco17")
    instances, skipped = load_instances(small_coco / TRAIN_ANN, small_coco / "train2017", meta, min_keypoints=8)
    assert len(instances) == 5 and skipped == {"too few keypoints": 1}
    instances, skipped = load_instances(small_coco / TRAIN_ANN, small_coco / "train2017", meta, min_keypoints=7)
    assert len(instances) == 6 and not skipped
    # Unlabelled keypoints get weight 0 in the sample.
    ann2 = next(i for i, inst in enumerate(instances) if inst.annotation_id == 2)
    weights = TopdownPoseDataset(instances, meta, (256, 192))[ann2]["keypoint_weights"]
    assert weights.tolist() == [0.0] * 10 + [1.0] * 7


def _missing_image(root: Path) -> int:
    (root / "train2017" / "000001.jpg").unlink()  # image id 2: annotations 3 and 4
    return 3


def _sixteen_keypoints(root: Path) -> int:
    def edit(data):
        ann = data["annotations"][4]
        ann["keypoints"] = ann["keypoints"][:48]

    _edit(root / TRAIN_ANN, edit)
    return 5


def _zero_size_bbox(root: Path) -> int:
    _edit(root / TRAIN_ANN, lambda d: d["annotations"][1]["bbox"].__setitem__(2, 0.0))
    return 2


BAD = {"missing image": (_missing_image, ["train2017/000001.jpg: image 2: file_name: image file not found"]),
       "16 keypoints": (_sixteen_keypoints, [f"{TRAIN_ANN}: annotation 5: keypoints: 48 numbers, expected 51"]),
       "zero-size bbox": (_zero_size_bbox, [f"{TRAIN_ANN}: annotation 2: bbox: width and height > 0"])}


@pytest.mark.parametrize("case", list(BAD))
def test_bad_record_raises_naming_file_and_record(small_coco, case):
    """The data check at the start of fit stops with the file, the record and the field."""
    breaker, fragments = BAD[case]
    breaker(small_coco)
    dm = _datamodule(small_coco)
    with pytest.raises(DataError) as info:
        dm.setup("fit")
    message = str(info.value)
    for fragment in fragments:
        assert f"{small_coco}/{fragment}" in message, message


@pytest.mark.parametrize("case", list(BAD))
def test_bad_record_skipped_on_request(small_coco, case):
    breaker, _ = BAD[case]
    ann_id = breaker(small_coco)
    dm = _datamodule(small_coco, on_bad_sample="skip")
    dm.setup("fit")
    lost = 2 if case == "missing image" else 1  # a missing image loses both of its people
    assert dm.skipped["train"] == {"bad record": lost}
    assert len(dm.train_set) == 6 - lost
    assert ann_id not in {inst.annotation_id for inst in dm.train_set.instances}
    assert len(dm.val_set) == 2 and dm.skipped["val"] == {}
    dm.train_set[0]  # the remaining samples load


def test_missing_annotation_file(tmp_path):
    dm = _datamodule(tmp_path)
    with pytest.raises(DataError, match="annotation file not found"):
        dm.setup("fit")


def test_not_a_coco_file(small_coco):
    (small_coco / TRAIN_ANN).write_text("{not json")
    with pytest.raises(DataError, match="person_keypoints_train2017.json"):
        _datamodule(small_coco).setup("fit")


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty"])
def test_undecodable_image_errors_at_getitem(small_coco, damage):
    path = small_coco / "train2017" / "000002.jpg"
    data = path.read_bytes()
    path.write_bytes({"truncated": data[: len(data) // 2], "garbage": b"this is not a jpeg" * 10,
                      "empty": b""}[damage])
    dm = _datamodule(small_coco)
    dm.setup("fit")  # the file exists: loading the index does not open it
    index = next(i for i, inst in enumerate(dm.train_set.instances) if inst.image_path == str(path))
    dm.train_set[0]
    with pytest.raises(DataError) as info:
        dm.train_set[index]
    assert str(path) in str(info.value)


def test_val_detections(small_coco):
    dets = [
        {"image_id": 1, "category_id": 1, "bbox": [10.0, 20.0, 60.0, 150.0], "score": 0.9},
        {"image_id": 1, "category_id": 1, "bbox": [80.0, 30.0, 50.0, 120.0], "score": 0.45},
        {"image_id": 1, "category_id": 1, "bbox": [5.0, 5.0, 40.0, 40.0], "score": 0.1},  # below threshold
        {"image_id": 1, "category_id": 3, "bbox": [5.0, 5.0, 40.0, 40.0], "score": 0.99},  # not a person
        {"image_id": 1, "category_id": 1, "bbox": [100.0, 100.0, 30.0, 60.0], "score": 0.3},
    ]
    (small_coco / "annotations" / "dets.json").write_text(json.dumps(dets))
    dm = _datamodule(small_coco, val_detections="annotations/dets.json", det_score_threshold=0.2)
    dm.setup("validate")
    assert dm.train_set is None
    assert len(dm.val_set) == 3
    assert dm.skipped["val"] == {"below score threshold": 1, "not a person": 1}
    for sample, det in zip((dm.val_set[i] for i in range(3)), (dets[0], dets[1], dets[4])):
        assert sample["box_score"] == pytest.approx(det["score"])
        assert sample["image_id"] == 1
        assert sample["area"] == pytest.approx(det["bbox"][2] * det["bbox"][3])
        assert torch.equal(sample["keypoint_weights"], torch.zeros(17))
        # The crop is centred on the detection box.
        x, y, w, h = det["bbox"]
        centre = affine.transform_points(np.array([95.5, 127.5]), sample["inverse_affine"].double().numpy())
        np.testing.assert_allclose(centre, [x + w / 2, y + h / 2], atol=1e-3)


def test_detections_errors(small_coco):
    meta = load_metainfo("coco17")
    ann, images = small_coco / VAL_ANN, small_coco / "val2017"
    det_file = small_coco / "annotations" / "dets.json"
    det_file.write_text(json.dumps([{"image_id": 1, "category_id": 1, "bbox": [1, 2, 0, 5], "score": 0.5}]))
    with pytest.raises(DataError, match=r"dets\.json: detection #0: field 'bbox'"):
        load_detections(det_file, ann, images, meta)
    det_file.write_text(json.dumps([{"image_id": 42, "category_id": 1, "bbox": [1, 2, 3, 5], "score": 0.5}]))
    with pytest.raises(DataError, match="image_id 42"):
        load_detections(det_file, ann, images, meta)
    with pytest.raises(DataError, match="detections file not found"):
        load_detections(small_coco / "nope.json", ann, images, meta)


def test_jpeg_with_data_after_the_end_marker_still_loads(small_coco):
    """Trailing bytes after EOI (padding, appended metadata) are not truncation."""
    path = small_coco / "train2017" / "000000.jpg"
    before = read_image(str(path))
    path.write_bytes(path.read_bytes() + b"\x00" * 64 + b"appended metadata \xff\xd8\xff")
    np.testing.assert_array_equal(read_image(str(path)), before)
    with pytest.raises(DataError, match="absent.jpg"):
        read_image(str(small_coco / "absent.jpg"))


def test_pose_validation_leaves_out_the_repeats_that_pad_the_last_batch(coco_dm, tiny_pose308_dir):
    from datamodules.loaders import PaddingKey
    from sapiens2_ft.tasks.pose.metric import CocoKeypointAP
    from sapiens2_ft.tasks.pose.module import PoseModule

    assert not coco_dm.val_set[0]["padding"] and coco_dm.val_set[PaddingKey(0)]["padding"]
    module = PoseModule(pretrained=str(tiny_pose308_dir), keypoints="coco17", input_size=(256, 192)).eval()
    module.configure_model()
    module.val_metrics = CocoKeypointAP(coco_dm.val_annotation_file, module.metainfo.sigmas)
    batch = next(iter(coco_dm.val_dataloader()))
    padded = {k: torch.cat([v, v[:1]]) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
    padded["padding"] = torch.tensor([False] * len(batch["image"]) + [True])  # as a ValShardSampler repeat
    with torch.no_grad():
        module.validation_step(padded, 0)
    assert torch.equal(torch.cat(module.val_metrics.image_ids), batch["image_id"])  # the repeat was not scored
