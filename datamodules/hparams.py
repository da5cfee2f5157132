"""Hyper-parameters of Lightning modules and data modules as plain data, and nested configs as dataclasses."""

from __future__ import annotations

from dataclasses import asdict, is_dataclass
from typing import TypeVar

T = TypeVar("T")


def plain_hparams(module) -> None:
    """Store dataclass hyper-parameters as dicts, so checkpoints load with ``weights_only=True``."""
    module.hparams.update({k: asdict(v) for k, v in module.hparams.items() if is_dataclass(v)})


def as_dataclass(cls: type[T], value: T | dict | None) -> T | None:
    """``value`` as a ``cls`` instance: Lightning's CLI hands nested dataclasses over as dicts."""
    return cls(**value) if isinstance(value, dict) else value
