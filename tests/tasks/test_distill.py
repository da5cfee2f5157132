"""Training with a teacher: with no labels at all, the student's outputs move toward the teacher's; a teacher term
that pairs each image with another image's teacher outputs does not pass the same check."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from datamodules.errors import BadConfig, RefusedInput
from sapiens2_ft.models.preprocessing import normalize_images
from sapiens2_ft.tasks.distill import bf16_supported, softened_kl
from sapiens2_ft.tasks.pose.module import PoseModule
from sapiens2_ft.tasks.seg.module import SegmentationModule

INPUT = (64, 48)
HEAD = {"upsample_out_channels": [32, 32], "conv_out_channels": [32]}
NO_BF16 = "flags : fpu sse avx2"  # a CPU without native bf16 (the float32 path, whatever this host has)


def images(count: int = 4, seed: int = 0) -> torch.Tensor:
    """Distinct pictures (uniform noise, uint8 (B, 3, H, W)): a random backbone tells them apart."""
    rng = np.random.default_rng(seed)
    return torch.from_numpy(rng.integers(0, 256, (count, 3, *INPUT), dtype=np.uint8))


def centred_agreement(student: torch.Tensor, teacher: torch.Tensor) -> float:
    """Cosine between the student's and the teacher's outputs after removing the batch mean: how much the student
    follows the teacher from image to image (a student that learnt the teacher's average output scores ~0)."""
    s, t = student - student.mean(0), teacher - teacher.mean(0)
    return float(torch.nn.functional.cosine_similarity(s.flatten(1), t.flatten(1)).mean())


def distil(module, key: str, steps: int, shuffle: bool) -> tuple[list[float], list[float]]:
    """``steps`` optimiser steps of the distillation term alone (no labels) on one batch; the loss and the centred
    agreement with the true teacher at each. ``shuffle``: the teacher's outputs paired with other images (a broken
    term). Seeded: the same student and order every call."""
    torch.manual_seed(0)
    batch = {"image": images()}
    true_teacher = module.teacher
    if shuffle:
        def shuffled(pixels, size=None):
            outputs = true_teacher(pixels, size)
            order = torch.roll(torch.arange(len(pixels)), 1)
            return {k: v[order] for k, v in outputs.items()}
        module.teacher = shuffled
    optimizer = torch.optim.Adam(module.model.parameters(), lr=3e-3)
    losses, agreements = [], []
    target = true_teacher(normalize_images(batch["image"]), INPUT)[key]
    for _ in range(steps):
        outputs, loss = module.distillation(batch["image"], None, batch)
        losses.append(float(loss.detach()))
        agreements.append(centred_agreement(outputs[key].detach(), target))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    module.teacher = true_teacher
    return losses, agreements


def moves_toward_teacher(losses: list[float], agreements: list[float]) -> bool:
    """The check: the loss falls by a third and the centred agreement rises by 0.25 over the steps."""
    return losses[-1] < 0.67 * losses[0] and agreements[-1] > agreements[0] + 0.25


def pose_student(teacher_dir, pretrained=None, **distill) -> PoseModule:
    """A COCO-17 student of ``teacher_dir``: a tiny-preset model, or ``pretrained``'s backbone with a new head."""
    module = PoseModule(keypoints="coco17", size="tiny", head=HEAD, input_size=INPUT, pretrained=pretrained,
                        distill={"teacher": str(teacher_dir), **distill})
    module.configure_model()
    module.attach_teacher(cpuinfo=NO_BF16)
    if pretrained is not None:
        torch.manual_seed(1)
        for layer in module.model.decode_head.modules():
            if hasattr(layer, "reset_parameters"):
                layer.reset_parameters()
    return module


def test_without_labels_the_student_moves_toward_the_teacher_and_a_shuffled_teacher_does_not(tiny_pose308_dir):
    """Pose, no labels: the student (the teacher's backbone, a new COCO-17 head) against the 308-keypoint teacher's
    COCO-17 rows. Measured over 8 steps: loss x0.3, agreement 0.0 -> 0.45; teacher outputs rolled by one image across
    the batch: the loss falls alike, the agreement goes to -0.1 (batch of 4 noise images)."""
    learnt = distil(pose_student(tiny_pose308_dir, tiny_pose308_dir), "heatmaps", 8, shuffle=False)
    assert moves_toward_teacher(*learnt), learnt
    broken = distil(pose_student(tiny_pose308_dir, tiny_pose308_dir), "heatmaps", 8, shuffle=True)
    assert not moves_toward_teacher(*broken), broken


def test_the_teacher_rows_are_the_students_keypoints_by_name_and_it_stays_frozen(tiny_pose308_dir):
    """The 308-keypoint teacher loaded for a COCO-17 student gives its rows of the COCO-17 names, in COCO order (the
    rows of REFERENCE §3, an independent source); Lightning's ``train()`` of the student leaves it in eval mode."""
    from sapiens2_ft.tasks.saved_model import load_inference

    module = pose_student(tiny_pose308_dir)
    module.train()
    pixels = normalize_images(images(2))
    chosen = module.teacher(pixels, INPUT)["heatmaps"]
    full = load_inference(tiny_pose308_dir).predict(pixels)["heatmaps"]
    rows = [0, 1, 2, 3, 4, 5, 6, 7, 8, 62, 41, 9, 10, 11, 12, 13, 14]
    torch.testing.assert_close(chosen, full[:, rows], rtol=1e-5, atol=1e-5)
    module.distillation(images(2), images(2, seed=1), {"image": images(2)})
    assert not module.teacher.model.training and module.model.training


def test_a_teacher_without_the_students_keypoints_is_a_clear_error(tiny_pose308_dir, tmp_path):
    module = PoseModule(keypoints="coco17", size="tiny", head=HEAD, input_size=INPUT,
                        distill={"teacher": str(tmp_path / "missing")})
    with pytest.raises(BadConfig, match="model.distill.teacher"):
        module.attach_teacher()
    module = PoseModule(keypoints="coco_wholebody", size="tiny", head=HEAD, input_size=INPUT,
                        distill={"teacher": str(tiny_pose308_dir)})
    with pytest.raises(BadConfig, match="has no keypoint"):
        module.attach_teacher()


def test_a_teacher_whose_config_says_another_model_is_refused(tiny_pretrain_dir):
    """A folder whose config.json is no pose model (here a bare backbone) is named, not loaded as one."""
    module = PoseModule(keypoints="coco17", size="tiny", head=HEAD, input_size=INPUT,
                        distill={"teacher": str(tiny_pretrain_dir)})
    with pytest.raises(BadConfig, match="holds a Sapiens2Model, not a pose model"):
        module.attach_teacher()


def test_a_teacher_folder_with_a_link_out_or_a_huge_config_is_refused(tiny_pose308_dir, tmp_path, monkeypatch):
    import shutil

    linked = tmp_path / "linked"
    shutil.copytree(tiny_pose308_dir, linked)
    (linked / "extra.json").symlink_to("/etc/passwd")
    module = PoseModule(keypoints="coco17", size="tiny", head=HEAD, input_size=INPUT,
                        distill={"teacher": str(linked)})
    with pytest.raises(RefusedInput, match="symbolic links"):
        module.attach_teacher()
    huge = tmp_path / "huge"
    shutil.copytree(tiny_pose308_dir, huge)
    monkeypatch.setenv("SAPIENS2_FT_MAX_JSON_BYTES", "100")
    module = PoseModule(keypoints="coco17", size="tiny", head=HEAD, input_size=INPUT,
                        distill={"teacher": str(huge)})
    with pytest.raises(RefusedInput, match="config.json"):
        module.attach_teacher()


@pytest.mark.parametrize("cpuinfo, bf16", [(NO_BF16, False), ("flags : fpu avx512f avx512_bf16", True)])
def test_the_teacher_runs_in_bf16_where_the_cpu_has_it(tiny_pose308_dir, cpuinfo, bf16):
    """Both hosts' paths: native bf16 flags give bf16 weights and autocast, and float32 outputs within bf16's
    rounding of the float32 teacher's; without them, float32 throughout."""
    assert bf16_supported(torch.device("cpu"), cpuinfo) is bf16
    module = PoseModule(keypoints="coco17", size="tiny", head=HEAD, input_size=INPUT,
                        distill={"teacher": str(tiny_pose308_dir)})
    module.attach_teacher(cpuinfo=cpuinfo)
    dtype = next(module.teacher.model.parameters()).dtype
    assert dtype == (torch.bfloat16 if bf16 else torch.float32)
    pixels = normalize_images(images(2))
    out = module.teacher(pixels, INPUT)["heatmaps"]
    reference = pose_student(tiny_pose308_dir).teacher(pixels, INPUT)["heatmaps"]
    assert out.dtype == torch.float32
    torch.testing.assert_close(out, reference, rtol=0.05 if bf16 else 1e-6, atol=0.05 if bf16 else 1e-6)


def test_the_kl_term_keeps_its_gradient_scale_across_temperatures():
    """x T^2 (Hinton et al.): for logits close to the teacher's, the gradient of T^2 KL at T is ~ (s - t) / C
    whatever T; without the factor it would shrink as 1 / T^2 (x16 between T=2 and T=8)."""
    torch.manual_seed(0)
    teacher = torch.randn(2, 5, 4, 4)
    norms = []
    for t in (2.0, 8.0):
        student = (teacher + 0.1 * torch.randn_like(teacher)).requires_grad_(True)
        softened_kl(student, teacher, 1, t).backward()
        norms.append(float(student.grad.norm()))
    assert 0.5 < norms[0] / norms[1] < 2.0, norms


def test_the_geometric_term_counts_the_mask_only():
    """L1 to the teacher's maps on the mask: differences off it cost nothing; per-image values count in full."""
    from sapiens2_ft.tasks.distill import map_distill

    teacher = {"normals": torch.zeros(2, 3, 4, 4), "scale": torch.ones(2)}
    mask = torch.zeros(2, 1, 4, 4, dtype=torch.bool)
    mask[:, :, :2] = True
    student = {"normals": torch.zeros(2, 3, 4, 4), "scale": torch.ones(2)}
    student["normals"][:, :, 2:] = 5.0  # off the mask
    assert float(map_distill(student, teacher, mask)) == 0.0
    student["normals"][:, :, :2] = 1.0  # on it: L1 1 per channel, averaged with the scale's 0
    assert float(map_distill(student, teacher, mask)) == pytest.approx(0.5)
    assert float(map_distill(student, teacher, None)) > 0.5


@pytest.mark.slow  # ~4 s: a seg checkpoint exported as the teacher
def test_a_seg_student_follows_its_teacher_without_labels(seg_checkpoint, tmp_path):
    """Seg through the same check: the teacher the export of ``seg_checkpoint``; KL at T=2."""
    from sapiens2_ft.training.hf_export import export_checkpoint

    export = export_checkpoint(seg_checkpoint, tmp_path / "teacher")
    module = SegmentationModule(size="tiny", input_size=INPUT, pretrained=str(export),
                                distill={"teacher": str(export), "temperature": 2.0})
    module.configure_model()
    module.attach_teacher(cpuinfo=NO_BF16)
    torch.manual_seed(1)
    for layer in module.model.decode_head.modules():
        if hasattr(layer, "reset_parameters"):
            layer.reset_parameters()
    assert moves_toward_teacher(*distil(module, "logits", 8, shuffle=False))
