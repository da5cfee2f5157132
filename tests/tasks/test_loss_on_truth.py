"""A perfect prediction scores (nearly) zero through each task module's training step, a wrong one more.

The prediction replaces the model (``predict``), the batch is a real training batch of the task's data module,
and the step is the module's own (``training_step`` -> ``loss_terms``): a target, a wiring or a loss that is
broken (the target negated, the wrong map compared, a pose target rendered off its keypoint) gives a perfect
prediction a loss, which the fast tier then sees. The perfect pose heatmaps are rendered here, from the UDP
formula, not by the codec under test.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from datamodules.pose_datamodule import PoseDataModule
from sapiens2_ft.tasks.dense_data import DenseTaskData
from sapiens2_ft.tasks.matting.module import MattingModule
from sapiens2_ft.tasks.multitask.data import PretrainingData
from sapiens2_ft.tasks.multitask.module import MultiTaskModule
from sapiens2_ft.tasks.normal.module import NormalModule
from sapiens2_ft.tasks.pointmap.module import PointmapModule
from sapiens2_ft.tasks.pose.module import PoseModule
from sapiens2_ft.tasks.seg.module import SegmentationModule

SIZE = (128, 96)
HEATMAP = (SIZE[0] // 4, SIZE[1] // 4)


def _first_batch(datamodule) -> dict:
    torch.manual_seed(0)
    datamodule.setup("fit")
    return next(iter(datamodule.train_dataloader()))


def _step_loss(module, batch: dict, outputs: dict) -> dict[str, float]:
    """Every loss term the module logs for ``batch`` when its model predicts ``outputs``, and the step's loss."""
    module.predict = lambda pixel_values, size=None: outputs
    logged = {}
    module.log_dict = lambda values, **kwargs: logged.update({k: float(v) for k, v in values.items()})
    logged["step"] = float(module.training_step(batch, 0))
    return logged


def udp_heatmaps(keypoints: torch.Tensor, weights: torch.Tensor, sigma: float, input_size=SIZE,
                 heatmap_size=HEATMAP) -> torch.Tensor:
    """Unnormalised Gaussians (B, K, h, w) at ``keypoints * (hm - 1) / (in - 1)``, cut to the pixels within
    floor(3 sigma) of the rounded centre per axis; zero where the weight is 0."""
    scale = torch.tensor([(heatmap_size[1] - 1) / (input_size[1] - 1), (heatmap_size[0] - 1) / (input_size[0] - 1)])
    mu = (keypoints.double() * scale)[..., None, None, :]  # (B, K, 1, 1, 2)
    ys, xs = torch.meshgrid(torch.arange(heatmap_size[0]), torch.arange(heatmap_size[1]), indexing="ij")
    grid = torch.stack([xs, ys], -1).double()  # (h, w, 2) as (x, y)
    gauss = torch.exp(-((grid - mu) ** 2).sum(-1) / (2 * sigma**2))
    window = ((grid - torch.floor(mu + 0.5)).abs() <= math.floor(3 * sigma)).all(-1)
    return (gauss * window * (weights[..., None, None] > 0)).float()


@pytest.fixture(scope="module")
def pose_batch(dense_root) -> dict:
    return _first_batch(PoseDataModule(root=str(dense_root), input_size=SIZE, batch_size=4, num_workers=0))


def _dense_batch(root, task: str, **options) -> dict:
    return _first_batch(DenseTaskData(task, root=str(root), input_size=SIZE, batch_size=2, num_workers=0, **options))


def test_pose_mse_is_zero_on_the_udp_targets_and_grows_off_them(pose_batch):
    module = PoseModule(size="tiny", input_size=SIZE, sigma=2.0)
    weights = pose_batch["keypoint_weights"]
    assert (weights > 0).sum() >= 20  # visible keypoints to score
    perfect = udp_heatmaps(pose_batch["keypoints"], weights, 2.0)
    assert _step_loss(module, pose_batch, {"heatmaps": perfect})["step"] < 1e-9
    shifted = udp_heatmaps(pose_batch["keypoints"] + torch.tensor([1.5 * 4, 0.0]), weights, 2.0)  # 1.5 heatmap px
    assert _step_loss(module, pose_batch, {"heatmaps": shifted})["step"] > 1e-3


def test_pose_cross_entropy_is_least_on_the_udp_targets(pose_batch):
    """Soft-target CE is the targets' entropy at best (not zero): the targets' log beats a shifted guess."""
    module = PoseModule(size="tiny", input_size=SIZE, sigma=2.0, loss="heatmap_ce", loss_weight=1.0)
    weights = pose_batch["keypoint_weights"]
    target = udp_heatmaps(pose_batch["keypoints"], weights, 2.0).double()
    visible = weights > 0
    dist = target[visible].flatten(1) / target[visible].flatten(1).sum(-1, keepdim=True)
    entropy = -(dist * dist.clamp_min(1e-300).log()).sum(-1).mean()
    perfect = target.clamp_min(1e-30).log().float()
    best = _step_loss(module, pose_batch, {"heatmaps": perfect})["step"]
    assert best == pytest.approx(float(entropy), abs=1e-4)
    shifted = udp_heatmaps(pose_batch["keypoints"] + torch.tensor([1.5 * 4, 0.0]), weights, 2.0)
    assert _step_loss(module, pose_batch, {"heatmaps": shifted.clamp_min(1e-30).log()})["step"] > best + 0.5


def _one_hot_logits(labels: torch.Tensor, num_classes: int = 29) -> torch.Tensor:
    classes = torch.where(labels == 255, 0, labels).long()
    return 30.0 * F.one_hot(classes, num_classes).permute(0, 3, 1, 2).float()


def _perfect_and_wrong(task: str, batch: dict) -> tuple[dict, dict]:
    """The prediction that is the batch's targets, and a wrong one."""
    if task == "seg":
        logits = _one_hot_logits(batch["labels"])
        return {"logits": logits}, {"logits": logits.roll(1, dims=1)}  # every pixel one class off
    if task == "normal":
        return {"normals": batch["normals"]}, {"normals": -batch["normals"]}
    if task == "pointmap":
        perfect = {"pointmap": batch["pointmap"], "scale": batch["scale"]}
        return perfect, {"pointmap": 1.2 * batch["pointmap"], "scale": 1.2 * batch["scale"]}
    return {"alpha": batch["alpha"], "foreground": batch["foreground"]}, {"alpha": 1.0 - batch["alpha"],
                                                                          "foreground": batch["foreground"]}


DENSE = {"seg": (SegmentationModule, {}, 1e-6), "normal": (NormalModule, {}, 1e-6),
         "pointmap": (PointmapModule, {}, 1e-5),  # SiLog's sqrt of its 1e-12 floor: 1e-6
         # every sample's colours changed (the foreground with the image); 8-bit images: composition ~1e-4
         "matting": (MattingModule, {"augment": {"photometric_prob": 1.0}}, 1e-3)}


@pytest.mark.parametrize("task", list(DENSE))
def test_dense_loss_is_zero_on_the_targets_and_grows_off_them(dense_root, task):
    module_class, options, tolerance = DENSE[task]
    batch = _dense_batch(dense_root, task, **options)
    perfect, wrong = _perfect_and_wrong(task, batch)
    module = module_class(size="tiny", input_size=SIZE)
    best = _step_loss(module, batch, perfect)
    assert len(best) > 2 and all(abs(v) < tolerance for v in best.values()), best  # each term, the total, the step
    assert _step_loss(module, batch, wrong)["step"] > 0.1


def test_multitask_loss_is_zero_on_every_heads_targets(dense_root):
    """Each head predicts its targets at the head's resolution (a quarter of the input's: the dense maps are
    sampled at cell centres, the intrinsics follow, which the pointmap's intrinsics term checks)."""
    batch = _first_batch(PretrainingData(root=str(dense_root), input_size=SIZE, batch_size=2, num_workers=0,
                                             dense_augment={"blur_prob": 0.0}))  # one augment for every head:
    # blur breaks the matting composition (the matting target spec turns it off; here nothing would)
    module = MultiTaskModule(size="tiny", input_size=SIZE, pose_loss="mse", sigma=2.0)
    module.task_modules = module.make_task_modules()
    module.model = lambda compute: compute()  # the shared backbone's forward, without a backbone
    pose = batch["pose"]

    def heads(wrong: bool) -> dict:
        predictions = {"pose": {"heatmaps": udp_heatmaps(pose["keypoints"] + 6.0 * wrong, pose["keypoint_weights"],
                                                         2.0)}}
        for task in ("seg", "normal", "pointmap", "matting"):
            view = {k: v[..., 2::4, 2::4] if torch.is_tensor(v) and v.ndim >= 3 else v for k, v in batch[task].items()}
            predictions[task] = _perfect_and_wrong(task, view)[wrong]
        return predictions

    for wrong in (False, True):
        predictions = heads(wrong)
        for name, task in module.task_modules.items():
            task.predict = lambda pixel_values, size=None, out=predictions[name]: out
        module.log_dict = lambda values, **kwargs: values
        losses, _ = module._losses(batch, "train")
        if wrong:
            assert all(float(v) > 1e-3 for v in losses.values()), losses
        else:
            assert all(abs(float(v)) < 1e-3 for v in losses.values()), losses
