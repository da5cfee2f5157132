"""Pseudo-labels: a model's sure predictions written as a data set; the data modules read it, and the score filters
hold against the same model's own predictions."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from datamodules.boundary.images import read_image
from datamodules.pose_datamodule import PoseDataModule
from sapiens2_ft.pseudo_labels import main
from sapiens2_ft.tasks.dense_data import DenseTaskData
from sapiens2_ft.tasks.saved_model import load_inference


def test_pose_pseudo_labels_keep_the_sure_people_and_keypoints_and_train_as_coco(tiny_coco, tiny_pose308_dir,
                                                                                 tmp_path, capsys):
    photos = tiny_coco / "train2017"
    inference = load_inference(tiny_pose308_dir)
    images = [read_image(str(p)) for p in sorted(photos.glob("*.jpg"))]
    boxes = [np.array([[0, 0, im.shape[1], im.shape[0], 1.0]]) for im in images]
    people = [p for found in inference.estimate(images, boxes, 4) for p in found]
    scores = sorted(p["score"] for p in people)
    min_score = (scores[1] + scores[2]) / 2  # two of the four people fall below it
    keypoint_scores = np.concatenate([p["scores"] for p in people])
    keypoint_score = float(np.median(keypoint_scores))
    out = tmp_path / "pseudo"
    status = main(["--model", str(tiny_pose308_dir), "--input", str(photos), "--out", str(out), "--min_score",
                   str(min_score), "--keypoint_score", str(keypoint_score), "--val_fraction", "0.25", "--seed", "1",
                   "--batch_size", "2", "--device", "cpu"])
    assert status == 0
    written = [a for split in ("train", "val") if (out / f"annotations/{split}.json").exists()
               for a in json.loads((out / f"annotations/{split}.json").read_text())["annotations"]]
    sure = [p for p in people if p["score"] >= min_score]
    assert len(written) == len(sure) == 2
    labelled = sorted(a["num_keypoints"] for a in written)
    assert labelled == sorted(int((p["scores"] >= keypoint_score).sum()) for p in sure)
    assert "train on them: python train.py --config pose_custom.yaml" in capsys.readouterr().out
    data = PoseDataModule(root=str(out), keypoints=str(out / "keypoints.yaml"), input_size=(64, 48), batch_size=1,
                          num_workers=0, index_cache=False)
    data.setup("fit")
    assert len(data.train_set) + len(data.val_set) == 2
    item = data.train_set[0]
    assert item["keypoint_weights"].sum() > 0


def test_seg_pseudo_labels_ignore_the_unsure_pixels_and_train_as_label_maps(seg_checkpoint, dense_root, tmp_path):
    from sapiens2_ft.training.hf_export import export_checkpoint

    model = export_checkpoint(seg_checkpoint, tmp_path / "model")
    photos = dense_root / "val" / "images"
    out = tmp_path / "pseudo"
    assert main(["--model", str(model), "--input", str(photos), "--out", str(out), "--min_score", "0.2",
                 "--val_fraction", "0", "--overwrite"]) == 0
    inference = load_inference(model)
    ignored = []
    for path in sorted(photos.iterdir()):
        logits = inference.image_outputs([read_image(str(path))])[0]["logits"][0]
        confidence, labels = logits.float().softmax(0).max(0)
        expected = torch.where(confidence >= 0.2, labels, 255).numpy().astype(np.uint8)
        written = read_image(str(out / "train" / "labels" / f"{path.stem}.png"), None)
        np.testing.assert_array_equal(written[..., 0] if written.ndim == 3 else written, expected)
        ignored.append(float((expected == 255).mean()))
    assert 0.05 < np.mean(ignored) < 0.95, ignored  # the filter leaves some pixels out and keeps others
    data = DenseTaskData("seg", root=str(out), input_size=(64, 48), val_split="train", batch_size=1, num_workers=0)
    data.setup("fit")
    assert len(data.val_set) == len(list(photos.iterdir()))


def test_a_score_nobody_reaches_is_a_message(tiny_coco, tiny_pose308_dir, tmp_path):
    with pytest.raises(SystemExit, match="nobody in 4 images scores that high"):
        main(["--model", str(tiny_pose308_dir), "--input", str(tiny_coco / "train2017"), "--out",
              str(tmp_path / "out"), "--min_score", "1.0"])
