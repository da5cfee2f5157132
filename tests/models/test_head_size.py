"""The size of the maps a head outputs against its input, for every head layout of the task registry: the released
models' dense heads output at the input size (so transformers' post-processing can remove a letterbox from them),
pose's heatmaps and the CPU-sized heads of the demos at a quarter of it."""

from __future__ import annotations

import pytest
import torch
from transformers import Sapiens2Config, Sapiens2HeadConfig

from sapiens2_ft.models.head_size import output_scale
from sapiens2_ft.models.presets import BACKBONES
from sapiens2_ft.tasks.registry import TASKS, build_task_model

LAYOUTS = [(task, size) for task, spec in TASKS.items() for size in spec.model.heads]


@pytest.mark.parametrize("task,size", LAYOUTS, ids=[f"{t}-{s}" for t, s in LAYOUTS])
def test_released_dense_heads_output_at_the_input_size(task, size):
    spec = TASKS[task]
    config = Sapiens2Config(**BACKBONES[size], num_labels=max(len(spec.model.outputs), 2),
                            head_config=Sapiens2HeadConfig(**spec.model.heads[size]))
    cpu_sized, heatmaps = size in ("tiny", "mini"), spec.resize is None
    assert output_scale(config) == (0.25 if cpu_sized or heatmaps else 1.0)


def test_the_scale_is_that_of_a_real_forward_pass():
    """The meta-device answer equals the shapes of a real model's outputs (the tiny seg head: 64 x 48 -> 16 x 12)."""
    model, _ = build_task_model("seg", ["a", "b"], (64, 48), size="tiny")
    with torch.no_grad():
        logits = model(pixel_values=torch.zeros(1, 3, 64, 48)).logits
    assert logits.shape[-2:] == (16, 12) and output_scale(model.config) == 0.25
