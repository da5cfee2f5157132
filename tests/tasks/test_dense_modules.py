"""Dense-task LightningModules: one training and validation step each, head layouts, checkpoint loading."""

from __future__ import annotations

from pathlib import Path

import cv2
import numpy as np
import pytest
import torch
from transformers import Sapiens2ForNormalEstimation, Sapiens2ForPointmapEstimation, Sapiens2HeadConfig

from sapiens2_ft.models.preprocessing import normalize_images
from sapiens2_ft.tasks.albedo.module import AlbedoModule
from sapiens2_ft.tasks.dense_data import DenseTaskData
from sapiens2_ft.tasks.matting.module import MattingModule
from sapiens2_ft.tasks.normal.module import NormalModule
from sapiens2_ft.tasks.pointmap.module import PointmapModule, to_metric
from sapiens2_ft.tasks.registry import TASKS, build_task_model
from sapiens2_ft.tasks.seg.module import SegmentationModule
from conftest import tiny_pose_config

SIZE = (128, 96)
MODULES = {"seg": SegmentationModule, "normal": NormalModule, "pointmap": PointmapModule, "matting": MattingModule,
           "albedo": AlbedoModule}
SAVED = {"seg": [".png"], "normal": [".npy", "_normal.png"], "pointmap": [".npy", "_depth.png"],
         "matting": ["_alpha.png", "_foreground.png"], "albedo": [".npy", "_albedo.png"]}


def _batch(root: Path, task: str, split: str = "train") -> dict:
    dm = DenseTaskData(task, root=str(root), input_size=SIZE, batch_size=2, num_workers=0)
    dm.setup("fit")
    loader = dm.train_dataloader() if split == "train" else dm.val_dataloader()
    return next(iter(loader))


@pytest.mark.parametrize("task", list(MODULES))
def test_train_and_validation_step(dense_root, tmp_path, task):
    torch.manual_seed(0)
    module = MODULES[task](size="tiny", input_size=SIZE)
    module.configure_model()
    loss = module.training_step(_batch(dense_root, task), 0)
    assert torch.isfinite(loss) and loss > 0
    loss.backward()
    grads = [p.grad for p in module.parameters() if p.requires_grad]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    assert any(g.abs().sum() > 0 for g in grads[:5])  # reaches the backbone's first parameters

    module.eval()
    module.on_validation_epoch_start()
    with torch.no_grad():
        batch = _batch(dense_root, task, "val")
        module.validation_step(batch, 0)
    metrics = module.val_metrics.compute()
    assert all(torch.isfinite(v).all() for v in metrics.values())
    if task == "pointmap":  # upstream's comparison and the predicted focal's, re-derived from the outputs
        with torch.no_grad():
            out = module.infer(normalize_images(batch["image"]), size=batch["image"].shape[-2:])
        valid = batch["mask"].reshape(out["pointmap"][:, 0].shape) > 0
        canonical = (out["pointmap"] - batch["pointmap"]).pow(2).sum(1).sqrt()  # canonical camera, per pixel
        true_scale = batch["scale"].reshape(-1, 1, 1).expand_as(canonical)
        assert metrics["l2_canonical"].item() == pytest.approx(canonical[valid].mean().item(), rel=1e-4)
        assert metrics["l2"].item() == pytest.approx((canonical / true_scale)[valid].mean().item(), rel=1e-4)
        guessed = to_metric(out["pointmap"], out["scale"]) - to_metric(batch["pointmap"], batch["scale"])
        assert metrics["l2_predicted_focal"].item() == pytest.approx(
            guessed.pow(2).sum(1).sqrt()[valid].mean().item(), rel=1e-4)
    module.write_validation_outputs(tmp_path)
    for name in batch["name"]:
        for suffix in SAVED[task]:
            path = tmp_path / "predictions" / f"{name}{suffix}"
            array = np.load(path) if suffix.endswith(".npy") else cv2.imread(str(path), cv2.IMREAD_UNCHANGED)
            assert array.shape[:2] == SIZE, path


@pytest.mark.parametrize("task", ["normal", "pointmap", "matting", "albedo"])
def test_released_head_layouts_predict_full_resolution(task):
    """The 0.4b pixel-shuffle heads (built on the meta device: no memory) upsample 16x to the input."""
    with torch.device("meta"):
        model, _ = build_task_model(task, TASKS[task].model.outputs, (1024, 768), size="0.4b")
        out = model(torch.zeros(1, 3, 1024, 768))
    maps = [v for k, v in out.items() if torch.is_tensor(v) and k != "scales"]
    assert all(tuple(m.shape[-2:]) == (1024, 768) for m in maps)
    assert sum(m.shape[1] for m in maps) == len(TASKS[task].model.outputs)
    if task == "pointmap":
        assert tuple(out["scales"].shape) == (1, 1)


def test_fixed_output_tasks_reject_label_sets():
    with pytest.raises(ValueError, match="predicts"):
        build_task_model("normal", ["a", "b"], SIZE, size="tiny")


def test_released_normal_checkpoint_loads_whole(tmp_path):
    """A normal checkpoint (unnamed LABEL_i channels) loads backbone and head, nothing re-initialised."""
    config = tiny_pose_config(3)
    config.head_config = Sapiens2HeadConfig(use_pixel_shuffle=True, upsample_kernel_size=3,
                                            upsample_out_channels=[16, 16], conv_out_channels=[8])
    source = Sapiens2ForNormalEstimation(config)
    source.save_pretrained(tmp_path)
    model, report = build_task_model("normal", TASKS["normal"].model.outputs, (256, 192), pretrained=str(tmp_path))
    assert (report.backbone, report.head) == ("pretrained", "pretrained")
    x = torch.randn(1, 3, 256, 192)
    torch.testing.assert_close(model.eval()(x).normals, source.eval()(x).normals)


def test_pointmap_scale_head_follows_the_input_size(tmp_path):
    """The scale MLP input is fixed by image_size: another size rebuilds only its first layer."""
    config = tiny_pose_config(3)
    config.head_config = Sapiens2HeadConfig(use_pixel_shuffle=True, upsample_kernel_size=3,
                                            upsample_out_channels=[16, 16], conv_out_channels=[8],
                                            scale_conv_out_channels=[16, 8], scale_conv_kernel_size=3,
                                            scale_final_hidden_sizes=[16, 8])
    config.head_config._init_scale_final_input_size(config.image_size, config.patch_size)
    source = Sapiens2ForPointmapEstimation(config)
    source.save_pretrained(tmp_path)
    same, report = build_task_model("pointmap", TASKS["pointmap"].model.outputs, (256, 192), pretrained=str(tmp_path))
    assert report.notes == []
    other, report = build_task_model("pointmap", TASKS["pointmap"].model.outputs, (128, 96), pretrained=str(tmp_path))
    assert report.notes and "scale MLP input layer new" in report.notes[0]
    assert other(torch.zeros(2, 3, 128, 96)).scales.shape == (2, 1)
    kept = other.scale_head.predictor.block2.layers[0].weight
    assert torch.equal(kept, source.scale_head.predictor.block2.layers[0].weight)


def test_to_metric_divides_all_three_axes_by_scale():
    canonical = torch.rand(2, 3, 2, 2) + 0.5
    metric = to_metric(canonical, torch.tensor([2.0, 4.0]))
    torch.testing.assert_close(metric[0], canonical[0] / 2.0)
    torch.testing.assert_close(metric[1], canonical[1] / 4.0)
    torch.testing.assert_close(to_metric(canonical, torch.tensor([[2.0], [4.0]])), metric)  # (B, 1) scales


def test_scale_branch_too_small_input_is_a_clear_error():
    with pytest.raises(ValueError, match="too small for the pointmap scale branch"):
        build_task_model("pointmap", TASKS["pointmap"].model.outputs, (128, 96), size="0.1b")


@pytest.mark.parametrize("module", [MattingModule, PointmapModule])
def test_unknown_loss_weight_names_are_a_clear_error(module):
    with pytest.raises(ValueError, match=r"model.loss_weights: unknown names \['nope'\]"):
        module(size="tiny", loss_weights={"nope": 1.0})


def test_validation_leaves_out_the_repeats_that_pad_the_last_batch(dense_root):
    torch.manual_seed(0)
    module = SegmentationModule(size="tiny", input_size=SIZE).eval()
    module.configure_model()
    batch = _batch(dense_root, "seg", "val")  # the two val samples
    assert not batch["padding"].any()
    padded = {k: torch.cat([v, v[:1]]) if isinstance(v, torch.Tensor) else v + v[:1] for k, v in batch.items()}
    padded["padding"] = torch.tensor([False, False, True])  # as a ValShardSampler repeat arrives
    scores = []
    for b in (batch, padded):
        module.on_validation_epoch_start()
        with torch.no_grad():
            module.validation_step(b, 0)
        scores.append(module.val_metrics.compute()["mIoU"])
    assert torch.equal(scores[0], scores[1])
    assert module.val_metrics.confmat.sum() == 2 * SIZE[0] * SIZE[1] - (batch["labels"] == 255).sum()
