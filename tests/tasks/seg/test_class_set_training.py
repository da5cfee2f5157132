"""A class set on a released 29-class head: rows by name, merges from their sources' rows, a new class fresh; the
data's labels mapped onto the set; a few training steps."""

from __future__ import annotations

import math
import shutil

import cv2
import lightning as L
import numpy as np
import pytest
import torch
from transformers import Sapiens2ForSemanticSegmentation, Sapiens2HeadConfig

from datamodules.body_parts import SAPIENS2_PART_CLASSES
from datamodules.classes.class_set import load_class_set
from datamodules.errors import DataError
from sapiens2_ft.tasks.dense_data import DenseTaskData
from sapiens2_ft.tasks.registry import build_task_model
from sapiens2_ft.tasks.saved_model import load_inference
from sapiens2_ft.tasks.seg.module import SegmentationModule
from sapiens2_ft.training.hf_export import export_checkpoint
from conftest import tiny_pose_config

MY_PARTS = "name: my_parts\nextends: coarse\nclasses: [{name: Bag, colour: [10, 20, 30]}]\n"


def released_seg(folder, same_rows_within=None):
    """A tiny 29-class seg model saved as the hub holds one; ``same_rows_within``: a class set whose merges' source
    rows are made equal (their logits then agree everywhere)."""
    config = tiny_pose_config(len(SAPIENS2_PART_CLASSES))
    config.head_config = Sapiens2HeadConfig(upsample_out_channels=[16, 16], conv_out_channels=[16])
    torch.manual_seed(0)
    model = Sapiens2ForSemanticSegmentation(config)
    predictor = model.decode_head.predictor
    with torch.no_grad():
        predictor.bias.normal_(0, 1.0)  # rows that differ in their biases too
        for rows in (same_rows_within.merges.values() if same_rows_within else ()):
            ids = [SAPIENS2_PART_CLASSES.index(r) for r in rows]
            predictor.weight[ids] = predictor.weight[ids[0]].clone()
            predictor.bias[ids] = predictor.bias[ids[0]].clone()
    model.save_pretrained(folder)
    return model.eval()


def logits_of(model, image):
    with torch.no_grad():
        return model(image).logits


def test_rows_by_name_a_merge_from_its_sources_and_a_new_class_fresh(tmp_path):
    (tmp_path / "sets").mkdir()
    (tmp_path / "sets" / "my_parts.yaml").write_text(MY_PARTS)
    parts = load_class_set(str(tmp_path / "sets" / "my_parts.yaml"))
    released = released_seg(tmp_path / "model")
    model, report = build_task_model("seg", parts.names, (64, 48), pretrained=str(tmp_path / "model"),
                                     label_sources=parts.merges)
    assert report.transferred == ["Background", "Hair"] and report.new == ["Bag"]
    assert report.merged[3] == "Hands <- Left_Hand + Right_Hand" and "merged from the rows" in str(report)
    image = torch.randn(2, 3, 64, 48)
    old, new = logits_of(released, image), logits_of(model.eval(), image)
    for i, name in enumerate(parts.names):
        rows = [SAPIENS2_PART_CLASSES.index(s) for s in parts.sources[i]]
        if name in ("Background", "Hair"):  # kept: the very row
            assert torch.equal(new[:, i], old[:, rows[0]])
        elif rows:  # merged: mean of the sources' logits + log k, never above their logsumexp (Jensen)
            torch.testing.assert_close(new[:, i], old[:, rows].mean(1) + math.log(len(rows)), atol=1e-4, rtol=1e-4)
            assert bool((new[:, i] <= old[:, rows].logsumexp(1) + 1e-4).all())
    assert not torch.allclose(new[:, -1], old[:, 0])  # Bag starts fresh


def test_a_merge_starts_with_the_sum_of_its_sources_probabilities_where_their_logits_agree(tmp_path):
    """softmax(logsumexp of the sources) = the sum of their probabilities; the merged row reaches it exactly where
    the sources' logits agree (here: equal rows), for every class of a set that takes all 29."""
    coarse = load_class_set("coarse")
    released = released_seg(tmp_path, same_rows_within=coarse)
    model, _ = build_task_model("seg", coarse.names, (64, 48), pretrained=str(tmp_path), label_sources=coarse.merges)
    image = torch.randn(1, 3, 64, 48)
    old, new = logits_of(released, image).softmax(1), logits_of(model.eval(), image).softmax(1)
    for i, rows in enumerate(coarse.sources):
        summed = old[:, [SAPIENS2_PART_CLASSES.index(s) for s in rows]].sum(1)
        torch.testing.assert_close(new[:, i], summed, atol=1e-5, rtol=1e-4)


@pytest.fixture
def bag_data(dense_root, tmp_path):
    """``dense_root``'s images with labels of the 29 and one more class, ``Bag`` (id 29), named in classes.txt."""
    root = tmp_path / "bags"
    for split in ("train", "val"):
        shutil.copytree(dense_root / split / "images", root / split / "images")
        (root / split / "labels").mkdir()
        for path in sorted((dense_root / split / "labels").glob("*.png")):
            labels = cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
            labels[4:20, 4:20] = 29
            cv2.imwrite(str(root / split / "labels" / path.name), labels)
    (root / "classes.txt").write_text("\n".join([*SAPIENS2_PART_CLASSES, "Bag"]) + "\n")
    (tmp_path / "my_parts.yaml").write_text(MY_PARTS)
    return root, str(tmp_path / "my_parts.yaml")


def test_a_set_with_a_merge_and_a_new_class_trains_a_few_steps(bag_data, tmp_path):
    root, parts = bag_data
    released_seg(tmp_path / "model")
    data = DenseTaskData("seg", root=str(root), classes=parts, input_size=(64, 48), batch_size=2, num_workers=0)
    data.setup("fit")
    labels = data.val_set[0]["labels"]
    raw = cv2.imread(str(sorted((root / "val" / "labels").glob("*.png"))[0]), cv2.IMREAD_UNCHANGED)
    assert set(labels.unique().tolist()) <= set(range(9)) | {255} and bool((labels == 8).any())  # Bag
    assert (raw == 29).any() and raw.max() > 8  # the files are in the 29 + Bag, the items in the set's ids
    names = list(load_class_set(parts).names)
    module = SegmentationModule(pretrained=str(tmp_path / "model"), class_names=names, classes=parts,
                                input_size=(64, 48))
    trainer = L.Trainer(max_steps=2, accelerator="cpu", logger=False, enable_checkpointing=False,
                        enable_progress_bar=False, limit_val_batches=1, num_sanity_val_steps=0, val_check_interval=2,
                        default_root_dir=tmp_path)
    trainer.fit(module, datamodule=data)
    assert trainer.global_step == 2 and module.model.decode_head.predictor.out_channels == 9
    assert "Bag" in module.load_report.new and len(module.load_report.merged) == 6
    assert np.isfinite(float(trainer.callback_metrics["val/mIoU"]))
    trainer.save_checkpoint(tmp_path / "parts.ckpt")  # the export carries the set: its names, merges and colours
    export = export_checkpoint(tmp_path / "parts.ckpt", tmp_path / "export")
    assert load_class_set(str(export / "classes.yaml")).to_dict() == load_class_set(parts).to_dict()
    assert "9 classes (class set `my_parts`)" in (export / "README.md").read_text()
    loaded = load_inference(export)
    assert loaded.class_names == names and loaded.class_set.colours[-1] == (10, 20, 30)


def test_labels_the_set_lacks_are_an_error_listing_both_sets(bag_data):
    root, _ = bag_data
    data = DenseTaskData("seg", root=str(root), classes="coarse", input_size=(64, 48), batch_size=2, num_workers=0)
    with pytest.raises(DataError) as err:
        data.setup("fit")
    assert "classes.txt" in str(err.value) and "not in the set: ['Bag']" in str(err.value)
    assert "the set's 8: ['Background', 'Head', 'Hair'" in str(err.value)


def test_a_set_s_colours_draw_its_classes_and_the_palette_the_others():
    from sapiens2_ft.tasks.seg.inference import SegmentationInference
    from sapiens2_ft.tasks.visualize import palette

    inference = SegmentationInference((8, 6), classes="coarse")
    logits = torch.zeros(1, 8, 8, 6)
    logits[0, 1, :4] = 1.0  # Head: the set's colour, on the top half
    logits[0, 0, 4:] = 1.0  # Background: the image
    overlay = inference.files({"logits": logits}, 0, np.zeros((8, 6, 3), np.uint8))["_overlay.png"][..., ::-1]
    assert overlay[0, 0].tolist() == [round(0.7 * c) for c in (240, 180, 140)] and overlay[7, 5].tolist() == [0, 0, 0]
    plain = SegmentationInference((8, 6), class_names=list(load_class_set("coarse").names))
    drawn = plain.files({"logits": logits}, 0, np.zeros((8, 6, 3), np.uint8))["_overlay.png"][..., ::-1]
    assert drawn[0, 0].tolist() == np.round(0.7 * palette(8)[1].astype(float)).astype(int).tolist()
