"""The data module of multi-task pretraining: the data layer's ``MultiTaskDataModule``, handed the target specs of
the pretraining tasks (``tasks.py``) and the name of the task whose samples are person crops."""

from __future__ import annotations

from datamodules.multitask_datamodule import MultiTaskDataModule
from sapiens2_ft.tasks.multitask.tasks import PRETRAINING_TASKS
from sapiens2_ft.tasks.pose.spec import POSE


class PretrainingData(MultiTaskDataModule):
    """Person crops + whole images with all dense targets of the pretraining tasks."""

    def __init__(self, **kwargs):
        targets = {name: spec.data.targets for name, spec in PRETRAINING_TASKS.items() if spec.data.targets}
        super().__init__(targets, POSE.name, **kwargs)
