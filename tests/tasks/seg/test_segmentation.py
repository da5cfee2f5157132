"""Segmentation: class-name head transfer and the seg demo recipe end to end."""

from __future__ import annotations

import torch
from transformers import Sapiens2ForSemanticSegmentation, Sapiens2HeadConfig

from datamodules.body_parts import SAPIENS2_PART_CLASSES
from sapiens2_ft.tasks.registry import build_task_model
from sapiens2_ft.training.cli import main
from conftest import tiny_pose_config


def test_seg_head_rows_transfer_by_class_name(tmp_path):
    config = tiny_pose_config(len(SAPIENS2_PART_CLASSES))
    config.head_config = Sapiens2HeadConfig(upsample_out_channels=[16, 16, 16, 16], conv_out_channels=[16])
    source = Sapiens2ForSemanticSegmentation(config)
    source.save_pretrained(tmp_path)
    classes = ["Background", "Torso", "Hair", "Sky"]
    model, report = build_task_model("seg", classes, (256, 192), pretrained=str(tmp_path))
    assert report.head == "transferred"
    assert report.transferred == ["Background", "Torso", "Hair"] and report.new == ["Sky"]
    for i, name in enumerate(classes[:3]):
        row = SAPIENS2_PART_CLASSES.index(name)
        assert torch.equal(model.decode_head.predictor.weight[i], source.decode_head.predictor.weight[row])
    assert model(torch.zeros(1, 3, 256, 192)).logits.shape == (1, 4, 256, 192)


def test_seg_recipe_runs_end_to_end(tmp_path):
    """Wiring only (the seg recipe is not tuned to learn in a test's time yet): a short run leaves
    the run directory with seg metrics, checkpoints and predicted label maps."""
    run_dir = tmp_path / "run"
    summary = main([
        "--config", "seg_demo.yaml", "--run_dir", str(run_dir),
        "--data.root", str(tmp_path / "synthetic"), "--data.synthetic.num_images", "20",
        "--trainer.max_steps", "3", "--trainer.val_check_interval", "3", "--data.batch_size", "2",
        "--data.num_workers", "0", "--trainer.enable_progress_bar", "false",
    ])
    assert summary["monitor"] == "val/mIoU" and summary["global_step"] == 3
    assert {"mIoU", "mAcc", "aAcc", "ce", "dice"} <= set(summary["metrics"])
    assert 0.0 <= summary["metrics"]["mIoU"] <= 1.0
    assert "backbone pretrained, head pretrained" in summary["model"]  # the recipe's model.pretraining_head
    maps = sorted(p for p in (run_dir / "predictions").glob("*.png") if not p.stem.endswith("_overlay"))
    assert len(maps) == 4  # 20 images -> 4 val images, all saved (class ids, and their colour overlay)
    assert len(list((run_dir / "predictions").glob("*_overlay.png"))) == 4
    import cv2

    assert cv2.imread(str(maps[0]), cv2.IMREAD_UNCHANGED).shape == (256, 192)


def test_people_heads_are_the_pixels_of_the_head_classes_by_name():
    from sapiens2_ft.tasks.seg.inference import SegmentationInference

    classes = ["Background", "Torso", "Hair", "Face_Neck", "Sky"]
    logits = torch.zeros(1, len(classes), 4, 4)
    for label, (y, x) in zip(range(len(classes)), [(0, 0), (1, 1), (2, 2), (3, 3), (0, 3)]):
        logits[0, label, y, x] = 5.0  # class ``label`` wins at one pixel; background (0) everywhere else
    heads = SegmentationInference(class_names=classes).people_heads({"logits": logits})
    assert heads.dtype == torch.bool and heads.nonzero().tolist() == [[2, 2], [3, 3]]  # Hair, Face_Neck
    no_heads = SegmentationInference(class_names=["Background", "Person"])
    assert no_heads.people_heads({"logits": logits[:, :2]}) is None  # no head class: nothing to split by
