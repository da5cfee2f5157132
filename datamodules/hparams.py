"""Hyper-parameters of Lightning modules and data modules as plain data, and nested configs as dataclasses."""

from __future__ import annotations

from dataclasses import asdict, is_dataclass
from typing import TypeVar

T = TypeVar("T")


def _plain(value):
    if is_dataclass(value):
        return asdict(value)
    if isinstance(value, (list, tuple)) and any(is_dataclass(v) for v in value):
        return [asdict(v) if is_dataclass(v) else v for v in value]
    return value


def plain_hparams(module) -> None:
    """Store dataclass hyper-parameters (and lists of them) as dicts, so checkpoints load with
    ``weights_only=True``."""
    module.hparams.update({k: _plain(v) for k, v in module.hparams.items()})


def as_dataclass(cls: type[T], value: T | dict | None) -> T | None:
    """``value`` as a ``cls`` instance: Lightning's CLI hands nested dataclasses over as dicts."""
    return cls(**value) if isinstance(value, dict) else value


def as_dataclasses(cls: type[T], values: list | None) -> list[T] | None:
    """A list of ``cls`` instances from dicts or instances (``as_dataclass`` per entry)."""
    return None if values is None else [as_dataclass(cls, v) for v in values]
