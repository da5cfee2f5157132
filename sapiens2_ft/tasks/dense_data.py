"""The data module ``train.py`` builds for a whole-image task: the data layer's ``DenseDataModule``, handed the
target spec of the task its ``task`` names (from the registry). The data layer itself knows no task."""

from __future__ import annotations

from datamodules.dense.target_spec import TargetSpec
from datamodules.dense_datamodule import DenseDataModule
from sapiens2_ft.tasks.registry import TASKS, task_spec


def dense_targets(task: str) -> TargetSpec:
    """The target spec of the whole-image ``task``; a ValueError names the tasks that have one."""
    targets = task_spec(task).data.targets
    if targets is None:
        raise ValueError(f"task '{task}' has no per-pixel targets (those that have: "
                         f"{', '.join(name for name, spec in TASKS.items() if spec.data.targets is not None)})")
    return targets


class DenseTaskData(DenseDataModule):
    """Per-pixel targets of one ``task`` from ``root/{split}/...`` folders matched by file stem (``root``,
    ``input_size``, loaders and ``synthetic``: see ``SampleDataModule``).

    Args:
        task: ``seg``, ``normal``, ``pointmap``, ``matting`` or ``albedo`` (linked from the top-level ``task``): its
            target spec is the registry's.
    """

    def __init__(self, task: str, **kwargs):
        super().__init__(dense_targets(task), **kwargs)
