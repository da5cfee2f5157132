"""Placing a Sapiens2 task model for training: activation checkpointing, and FSDP2 sharding.

``place_model`` is what a task module's ``configure_model`` calls:

- no device mesh (one device, DDP): build the model, checkpoint every n-th block if asked;
- a device mesh (Lightning's ``ModelParallelStrategy``): rank 0 builds the model with its weights on
  the CPU (the only full copy), every rank builds the same architecture on the meta device,
  checkpoints blocks, applies ``fully_shard`` to every ``Sapiens2Layer`` and then the root, allocates
  only its own shards, and receives its slice of the weights from rank 0. A 5B model is never
  materialised on the accelerators, and each rank holds 1/N of every sharded parameter.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass
from typing import Callable

import torch
import torch.distributed as dist
from lightning.pytorch.utilities import rank_zero_info
from torch import nn
from torch._dynamo.exc import TorchDynamoException  # what compile raises for graphs it cannot compile
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    CheckpointImpl,
    CheckpointWrapper,
    checkpoint_wrapper,
)
from transformers.models.sapiens2.modeling_sapiens2 import Sapiens2Layer

from sapiens2_ft.models.factory import LoadReport

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


@dataclass
class ScaleConfig:
    """Memory options of the model.

    Args:
        activation_checkpointing: Recompute the activations of every n-th transformer block in the
            backward pass instead of storing them (0 = off, 1 = every block, 2 = every second, ...).
        param_dtype: FSDP2 mixed precision on GPU: dtype of the gathered parameters for compute
            (``bfloat16``; ``float32`` or null = no cast). Sharded parameters stay float32.
        reduce_dtype: FSDP2 dtype of the gradient reduce-scatter (``float32``).
        cpu_offload: FSDP2: keep sharded parameters, gradients and optimiser state in CPU memory.
        reshard_after_forward: FSDP2: free gathered block parameters after forward (ZeRO-3); false
            keeps them until backward (ZeRO-2-like: more memory, less communication).
        compile: ``torch.compile`` each transformer block (regional compilation: one block's graph serves
            every block of its kind), composed with checkpointing and FSDP2. A block that fails to compile
            runs eagerly, with a warning naming it.
        compile_backend: The ``torch.compile`` backend (``inductor``; ``aot_eager`` checks the graphs without
            generating code).
    """

    activation_checkpointing: int = 0
    param_dtype: str | None = "bfloat16"
    reduce_dtype: str = "float32"
    cpu_offload: bool = False
    reshard_after_forward: bool = True
    compile: bool = False
    compile_backend: str = "inductor"


def transformer_blocks(model: nn.Module) -> list[nn.Module]:
    """The ``Sapiens2Layer`` blocks of a model, in order (checkpoint-wrapped ones included)."""
    return [m for m in model.modules() if isinstance(m, Sapiens2Layer)]


def apply_activation_checkpointing(model: nn.Module, every: int) -> int:
    """Wrap every ``every``-th block (0 = none) in a non-reentrant checkpoint; returns the count.

    The wrapper keeps parameter names and state-dict keys as they were.
    """
    if every <= 0:
        return 0
    wrapped = 0
    for parent in list(model.modules()):
        for name, child in parent.named_children():
            if isinstance(child, Sapiens2Layer):
                index = int(name) if name.isdigit() else wrapped
                if index % every == 0:
                    setattr(parent, name, checkpoint_wrapper(child, checkpoint_impl=CheckpointImpl.NO_REENTRANT))
                    wrapped += 1
    return wrapped


def shard_model(model: nn.Module, mesh, config: ScaleConfig, on_gpu: bool) -> None:
    """``fully_shard`` each transformer block (wrapped or not), then the root, over ``mesh``."""
    from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, OffloadPolicy, fully_shard

    mixed = MixedPrecisionPolicy()
    if on_gpu and config.param_dtype not in (None, "float32"):
        mixed = MixedPrecisionPolicy(param_dtype=DTYPES[config.param_dtype], reduce_dtype=DTYPES[config.reduce_dtype])
    offload = CPUOffloadPolicy() if config.cpu_offload else OffloadPolicy()
    kwargs = dict(mesh=mesh, mp_policy=mixed, offload_policy=offload)
    for unit in block_units(model):
        fully_shard(unit, reshard_after_forward=config.reshard_after_forward, **kwargs)
    fully_shard(model, **kwargs)


def block_units(model: nn.Module) -> list[nn.Module]:
    """One module per transformer block: its checkpoint wrapper when it has one, else the block."""
    units = []
    for parent in model.modules():
        if isinstance(parent, CheckpointWrapper):
            continue
        for child in parent.children():
            if isinstance(getattr(child, "_checkpoint_wrapped_module", child), Sapiens2Layer):
                units.append(child)
    return units


class _CompiledForward:
    """A block's forward through ``torch.compile``; the first call (compilation included) is timed into
    ``stats``, and a compilation failure there or later (dynamo's errors, a backend's included) runs the block
    eagerly from then on, with a warning naming it. Errors of the computation itself (out of memory, a shape
    mismatch in eager code) are raised as they are."""

    def __init__(self, name: str, eager: Callable, backend: str, stats: dict):
        self.name, self.eager, self.stats, self.failed, self.timed = name, eager, stats, False, False
        self.compiled = torch.compile(eager, backend=backend)

    def __call__(self, *args, **kwargs):
        if self.failed:
            return self.eager(*args, **kwargs)
        start = time.perf_counter()
        try:
            out = self.compiled(*args, **kwargs)
        except TorchDynamoException as err:  # a backend or tracing error: this block stays eager
            self.failed = True
            reason = " ".join(line.strip() for line in str(err).splitlines()[:2] if line.strip())
            warnings.warn(f"torch.compile of {self.name} failed ({type(err).__name__}: {reason}); it runs eagerly",
                          stacklevel=2)
            return self.eager(*args, **kwargs)
        if not self.timed:
            self.timed = True
            self.stats["seconds"] += time.perf_counter() - start
            self.stats["done"] += 1
            if self.stats["done"] == self.stats["blocks"]:
                rank_zero_info(f"torch.compile ({self.stats['backend']}): {self.stats['blocks']} blocks compiled, "
                               f"{self.stats['seconds']:.1f} s in their first forward passes")
        return out


def compile_blocks(model: nn.Module, backend: str = "inductor") -> dict:
    """Compile every transformer block's forward in place (its checkpoint wrapper's, when it has one): module
    names and state-dict keys stay as they are. Returns the shared compile statistics."""
    units = block_units(model)
    stats = {"blocks": len(units), "done": 0, "seconds": 0.0, "backend": backend}
    for i, unit in enumerate(units):
        unit.forward = _CompiledForward(f"transformer block {i}", unit.forward, backend, stats)
    return stats


def _broadcast_object(obj, src: int = 0):
    box = [obj]
    dist.broadcast_object_list(box, src=src)
    return box[0]


def place_model(build: Callable[[], tuple[nn.Module, LoadReport]], model_class: Callable, config: ScaleConfig,
                mesh=None, device: torch.device | None = None,
                adapt: Callable[[nn.Module], None] | None = None) -> tuple[nn.Module, LoadReport | None]:
    """Build (``build()`` -> a model, report) and place the model; see the module docstring. ``model_class``:
    the model's class, or any callable that builds the same architecture from the built model's ``config``.
    ``adapt`` (freezing, LoRA: ``models.adapters``) changes every copy of the model the same way first.

    With a mesh, the report is returned on rank 0 only (None elsewhere).
    """
    adapt = adapt or (lambda model: None)
    if mesh is None:
        model, report = build()
        adapt(model)
        apply_activation_checkpointing(model, config.activation_checkpointing)
        if config.compile:
            compile_blocks(model, config.compile_backend)
        return model.train(), report  # from_pretrained returns eval mode; Lightning keeps each module's mode

    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    rank = dist.get_rank()
    full, report = build() if rank == 0 else (None, None)
    if rank == 0:
        adapt(full)
    model_config = _broadcast_object(full.config if rank == 0 else None)
    with torch.device("meta"):
        model = model_class(model_config)
    adapt(model)
    apply_activation_checkpointing(model, config.activation_checkpointing)
    if config.compile:
        compile_blocks(model, config.compile_backend)
    on_gpu = device is not None and device.type == "cuda"
    shard_model(model, mesh, config, on_gpu)
    model.to_empty(device=device or torch.device("cpu"))
    state = full.state_dict() if rank == 0 else {}
    set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True))
    # Non-persistent buffers (RoPE frequencies) are not in the state dict: copy them from rank 0.
    persistent = set(model.state_dict())
    source = dict(full.named_buffers()) if rank == 0 else {}
    for name, buffer in model.named_buffers():
        if name not in persistent:
            if rank == 0:
                buffer.copy_(source[name.replace("_checkpoint_wrapped_module.", "")])
            dist.broadcast(buffer, src=0)
    del full, state
    return model.train(), report

