"""Multi-task pretraining of the demo backbone (``configs/pretrain_demo_backbone.yaml``) as the rest of the package
sees it (``tasks/spec.py`` groups the fields by reader): no single model, no export, no inference object."""

from __future__ import annotations

from sapiens2_ft.tasks.spec import KEYPOINT_LINKS, Model, TaskSpec, Training

MULTITASK = TaskSpec(
    "multitask",
    Training("sapiens2_ft.tasks.multitask.module.MultiTaskModule",
             "sapiens2_ft.tasks.multitask.data.PretrainingData", ("val/loss", "min"), links=KEYPOINT_LINKS),
    Model(label_kind="keypoint"),
)
