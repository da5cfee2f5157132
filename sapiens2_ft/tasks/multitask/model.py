"""The multi-task model: one ``Sapiens2Model`` shared by the transformers task models of several tasks.

Each task model (``Sapiens2ForPoseEstimation``, ...) keeps its own head and post-processing; its backbone
slot holds a :class:`BackboneRef`, a module without parameters that calls the one shared backbone, so the
backbone is stored once (in checkpoints and in the optimiser) and sharded once. The model is built either from
task models already loaded (rank 0 or a single process, with pretrained weights) or from their configs alone
(``from_configs``: the empty copy FSDP2's other ranks build on the meta device,
through ``models.sharding.place_model`` like every task's model).

The heads are saved beside a pretrained backbone (``models.pretraining_heads``, keys ``<task>.<name>``) so that
continued pretraining from it starts with trained heads, not new ones.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

from sapiens2_ft.tasks.multitask.tasks import PRETRAINING_TASKS


class SharedBackbone(nn.Module):
    """A ``Sapiens2Model`` called by several task models. Called again with the very same input tensor it
    returns the previous output, so the heads of several tasks on one batch run the backbone once."""

    def __init__(self, backbone: nn.Module):
        super().__init__()
        self.backbone = backbone
        self._last: tuple[torch.Tensor, object] | None = None

    def forward(self, pixel_values: torch.Tensor, **kwargs):
        if self._last is not None and self._last[0] is pixel_values and not kwargs:
            return self._last[1]
        out = self.backbone(pixel_values, **kwargs)
        self._last = (pixel_values, out)
        return out

    def clear(self) -> None:
        self._last = None


class BackboneRef(nn.Module):
    """A task model's backbone slot: calls the shared backbone, which it does not register (no parameters)."""

    def __init__(self, shared: SharedBackbone):
        super().__init__()
        self.target = (shared,)  # a tuple: an attribute, not a submodule

    def forward(self, pixel_values: torch.Tensor, **kwargs):
        return self.target[0](pixel_values, **kwargs)


class MultiTaskModel(nn.Module):
    """Task models (name -> a transformers ``Sapiens2For<Task>``) around one shared backbone.

    ``config``: the task models' configs by name (what an empty copy is built from). The task modules run their
    own forward passes inside :meth:`forward`, so that a sharded model gathers and frees its parameters around
    them as FSDP2 does around any model's forward.
    """

    def __init__(self, task_models: dict[str, nn.Module]):
        super().__init__()
        first = next(iter(task_models.values()))
        self.backbone = SharedBackbone(first.model)  # the first task model's backbone, its weights as loaded
        for task_model in task_models.values():
            task_model.model = BackboneRef(self.backbone)  # replaces (and frees) its own backbone
        self.tasks = nn.ModuleDict(task_models)
        self.config = {name: m.config for name, m in task_models.items()}

    @classmethod
    def from_configs(cls, configs: dict) -> "MultiTaskModel":
        """The same architecture from the task models' configs alone (weights: random, or on the meta device)."""
        return cls({name: PRETRAINING_TASKS[name].model.transformers_class()(config)
                    for name, config in configs.items()})

    @property
    def backbone_config(self):
        """The shared backbone's ``Sapiens2Config``."""
        return self.backbone.backbone.config

    def forward(self, compute: Callable[[], dict]) -> dict:
        """``compute()``: the task modules' forward passes on this model's task models (their outputs)."""
        try:
            return compute()
        finally:
            self.backbone.clear()

    def load_heads(self, heads: dict[str, torch.Tensor]) -> str:
        """Load saved heads (``<task>.<name>`` -> tensor) when they fit every task model exactly; the outcome in
        words (heads of another layout or input size are left new)."""
        own = self.tasks.state_dict()
        mismatched = sorted(k for k in own if k not in heads or heads[k].shape != own[k].shape)
        if mismatched or set(heads) - set(own):
            return (f"pretraining heads not loaded: they do not fit this model ({len(mismatched)} of {len(own)} "
                    f"tensors differ, e.g. {mismatched[:2]}); the heads are new")
        self.tasks.load_state_dict({k: v.to(own[k].dtype) for k, v in heads.items()})  # saved in bf16
        return f"pretraining heads loaded ({len(own)} tensors of {', '.join(self.tasks)})"
