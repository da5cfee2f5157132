"""What a run's summary records about how it ran, for its readers and its model card: the command, the hardware
and the number of samples per split."""

from __future__ import annotations

import platform
import shlex
from pathlib import Path

import torch


def command_line(argv: list[str]) -> str:
    """``python train.py ARGS`` as the run was asked for (config names as given, before they are resolved)."""
    return shlex.join(["python", "train.py", *argv])


def cpu_name() -> str:
    """The CPU's model name (Linux: /proc/cpuinfo), else the platform's processor string."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text(errors="replace").splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown CPU"


def hardware(trainer) -> str:
    """The devices the run trained on: ``4 x NVIDIA H100 80GB HBM3`` or ``CPU: <model> (2 threads)``."""
    device = trainer.strategy.root_device
    if device.type == "cuda":
        return f"{trainer.world_size} x {torch.cuda.get_device_name(device)}"
    processes = f"{trainer.world_size} processes x " if trainer.world_size > 1 else ""
    return f"CPU: {cpu_name()} ({processes}{torch.get_num_threads()} threads)"


def sample_counts(datamodule) -> dict[str, int]:
    """Samples per split of a set-up data module (pose: person instances; dense tasks: images)."""
    counts = {}
    for split, attribute in (("train", "train_set"), ("val", "val_set")):
        dataset = getattr(datamodule, attribute, None)
        if dataset is not None:
            counts[split] = len(dataset)
    return counts


def run_facts(trainer, datamodule, argv: list[str]) -> dict:
    """The summary's ``command``, ``hardware`` and ``samples``."""
    return {"command": command_line(argv), "hardware": hardware(trainer), "samples": sample_counts(datamodule)}
