"""The memory estimate counts a teacher: frozen weights in the compute dtype, sharded under FSDP2, no gradients or
optimiser state, inference activations; unlabelled images double what the student and the teacher see."""

from __future__ import annotations

import pytest

from sapiens2_ft.memory import Setup, estimate, setup_from_config
from sapiens2_ft.models import presets
from sapiens2_ft.tasks.registry import build_task_model

BASE = dict(task="seg", size="tiny", num_labels=29, input_size=(64, 48), batch_size=2, world_size=1,
            strategy="single", bf16=True, checkpoint_every=0, cpu_offload=False)


def teacher_count(size: str) -> int:
    import torch

    with torch.device("meta"):
        model, _ = build_task_model("seg", [f"c{i}" for i in range(29)], (64, 48), size=size)
    return sum(p.numel() for p in model.parameters())


def test_a_teacher_adds_its_frozen_weights_and_inference_only():
    alone = estimate(Setup(**BASE))
    taught = estimate(Setup(**BASE, teacher_size="mini"))
    count = teacher_count("mini")
    assert taught.teacher_num_params == count and "mini" in presets.BACKBONES
    assert taught.teacher_params == 2 * count  # bf16, whole on the one device
    assert (taught.params, taught.grads, taught.optimizer, taught.activations) == \
        (alone.params, alone.grads, alone.optimizer, alone.activations)  # nothing of training for it
    assert taught.total(False) == pytest.approx(alone.total(False) + taught.teacher_params
                                                + taught.teacher_activations)
    # inference keeps one block at a time: less than its own training activations would be
    trained = estimate(Setup(**{**BASE, "size": "mini"}))
    assert 0 < taught.teacher_activations < trained.activations / 2
    fp32 = estimate(Setup(**{**BASE, "bf16": False}, teacher_size="mini"))
    assert fp32.teacher_params == 4 * count
    sharded = estimate(Setup(**{**BASE, "strategy": "fsdp2", "world_size": 4}, teacher_size="mini"))
    assert 2 * count / 4 < sharded.teacher_params < 2 * count


def test_unlabelled_images_double_the_images_of_a_step():
    taught = estimate(Setup(**BASE, teacher_size="mini"))
    both = estimate(Setup(**BASE, teacher_size="mini", unlabeled=True))
    four = estimate(Setup(**{**BASE, "batch_size": 4}, teacher_size="mini"))
    assert both.activations == four.activations and both.teacher_activations == four.teacher_activations
    assert both.activations > taught.activations


def test_the_estimate_reads_the_teacher_and_the_unlabelled_folder_from_the_recipe():
    setup = setup_from_config(["--config", "pose_coco.yaml", "--model.distill.teacher", "facebook/sapiens2-pose-5b",
                               "--data.unlabeled", "photos/"], world_size=1)
    assert (setup.size, setup.teacher_size, setup.unlabeled) == ("0.4b", "5b", True)
