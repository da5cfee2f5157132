"""Memory per device before launch: ``python -m sapiens2_ft.memory --config X [--world_size N] [overrides]``.

Reads the same configs and overrides as ``train.py`` and prints, per device, the parameters, gradients,
AdamW state, FSDP2 gathered parameters, and activations without and with activation checkpointing,
for the configured size, resolution, batch and strategy, and whether it fits ``--device_memory_gb``.

How the figures are made:
- parameter counts: the task model built on the meta device (exact, nothing allocated);
- parameters, gradients, AdamW moments: fp32 (4 + 4 + 8 bytes per parameter; gradients and moments only
  for the parameters that train: ``model.freeze``, ``model.lora``), divided by the world size under FSDP2;
  frozen linear weights take 2 bytes where ``model.frozen_dtype`` stores them in bf16 (``auto`` under
  bf16-mixed, ``models.adapters``); DDP adds gradient buckets (4 bytes per trained parameter);
- FSDP2 gathered parameters: two blocks (the current one and the prefetched next) plus the root
  (embeddings, head) in the compute dtype;
- activations: one real transformer block of each kind (full and grouped-query attention) run on the
  CPU for one sample at the configured token count (bf16 autocast for bf16 precision), counting the
  tensors autograd saves for backward (parameters saved as they are count as parameters, not here; a bf16
  copy of an fp32 frozen weight counts here); times the batch and the number of blocks of each kind; plus the
  head, counted on the meta device. Checkpointed blocks keep only their input, and backward
  recomputes one block at a time. Frozen blocks with nothing trainable before them save nothing; a LoRA
  block is measured with its adapters.
- a teacher (``model.distill.teacher``): its parameters frozen, in bf16 under bf16 precision (its inference
  autocast, ``tasks.distill``), divided by the world size under FSDP2 (plus its two gathered blocks and root), no
  gradients, no optimiser state; its activations those of inference: one block's at a time (the largest block's
  saved bytes, an upper bound of what lives inside it), for every image it sees; with ``data.unlabeled`` the student
  and the teacher see twice the batch (one unlabelled image per sample).
Not counted: the CUDA context and allocator fragmentation (keep ~10% free), data-loader pinned memory.
The activations are those of eager PyTorch; ``torch.compile`` fuses element-wise ops and saves less.
"""

from __future__ import annotations

import argparse
import re
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import Sapiens2Config
from transformers.models.sapiens2.modeling_sapiens2 import Sapiens2Layer, Sapiens2RopePositionEmbedding

from datamodules.errors import BadConfig, NotFound
from sapiens2_ft.exits import console_command
from sapiens2_ft.models import presets
from sapiens2_ft.models.adapters import LoraOptions, adapt, add_lora, frozen_storage, store_frozen
from sapiens2_ft.problems import Problems
from sapiens2_ft.tasks.registry import build_task_model, label_names, task_spec

GIB = 2**30
HEADROOM = 0.9  # usable share of device memory (CUDA context, fragmentation)


@dataclass
class Setup:
    """What the estimate depends on, as read from a config."""

    task: str
    size: str
    num_labels: int
    input_size: tuple[int, int]
    batch_size: int
    world_size: int
    strategy: str  # "single" | "ddp" | "fsdp2"
    bf16: bool
    checkpoint_every: int
    cpu_offload: bool
    freeze: str = "none"  # model.freeze
    freeze_blocks: int = 0
    lora: LoraOptions | None = None  # model.lora (rank 0: none)
    frozen_dtype: str = "float32"  # storage of the frozen linear weights (models.adapters.frozen_storage)
    head: dict | None = None  # model.head (None: the released layout of the size)
    teacher_size: str | None = None  # model.distill.teacher's size preset (None: no teacher)
    unlabeled: bool = False  # data.unlabeled: one unlabelled image per sample, through student and teacher


@dataclass
class Estimate:
    """Bytes per device."""

    params: float  # trained and frozen together
    grads: float
    optimizer: float
    buffers: float  # FSDP2 gathered parameters or DDP gradient buckets
    activations: float
    activations_checkpointed: float
    num_params: int
    trainable_params: int = 0  # 0: all of num_params
    frozen_bytes: float = 0.0  # the frozen part of params
    teacher_params: float = 0.0  # a teacher's frozen weights (and its FSDP2 gathered blocks)
    teacher_activations: float = 0.0  # its inference: one block at a time
    teacher_num_params: int = 0

    def total(self, checkpointed: bool) -> float:
        act = self.activations_checkpointed if checkpointed else self.activations
        return self.params + self.grads + self.optimizer + self.buffers + act + self.teacher_params \
            + self.teacher_activations


def _saved_bytes(fn, params=()) -> int:
    """Bytes of the tensors autograd saves for backward while running ``fn()``, except those that are (views of)
    ``params``: they take no memory beyond the parameters'."""
    total = 0
    storages = {p.untyped_storage().data_ptr() for p in params}

    def pack(t):
        nonlocal total
        if t.untyped_storage().data_ptr() not in storages:
            total += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        fn()
    return total


_MEASURED: dict = {}  # one measurement per block kind, for --table


def block_activation_bytes(config: Sapiens2Config, layer_idx: int, input_size, bf16: bool,
                           lora: LoraOptions | None = None, frozen_dtype: str = "float32") -> tuple[int, int, int]:
    lora = lora if lora is not None and lora.rank > 0 else None
    frozen_dtype = frozen_dtype if lora is not None else "float32"  # a trained block has no frozen weights
    key = (config.to_json_string(), layer_idx, tuple(input_size), bf16, repr(lora), frozen_dtype)
    if key not in _MEASURED:
        _MEASURED[key] = _measure_block(config, layer_idx, input_size, bf16, lora, frozen_dtype)
    return _MEASURED[key]


def _measure_block(config: Sapiens2Config, layer_idx: int, input_size, bf16: bool,
                   lora: LoraOptions | None = None, frozen_dtype: str = "float32") -> tuple[int, int, int]:
    """(saved bytes per sample, saved bytes independent of the batch, input bytes per sample) of one
    block, measured on the CPU at batch 1 and 2 (autocast saves bf16 copies of fp32 weights once); with
    ``lora``, the block with its adapters and its own weights frozen, stored in ``frozen_dtype``."""
    torch.manual_seed(0)
    layer = Sapiens2Layer(config, layer_idx=layer_idx)
    if lora is not None:
        holder = torch.nn.Module()
        holder.layer = torch.nn.ModuleList([layer])  # the names LoRA's targets expect: layer.N.attention.*
        add_lora(holder, lora)
        if frozen_dtype != "float32":
            store_frozen(layer, getattr(torch, frozen_dtype))
    rope = Sapiens2RopePositionEmbedding(config)
    h, w = input_size
    tokens = 1 + config.num_register_tokens + (h // config.patch_size) * (w // config.patch_size)
    saved = []
    for batch in (1, 2):
        position = rope(torch.empty(batch, 3, h, w))
        x = torch.randn(batch, tokens, config.hidden_size, requires_grad=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            saved.append(_saved_bytes(lambda: layer(x, position_embeddings=position), list(layer.parameters())))
    per_sample = saved[1] - saved[0]
    return per_sample, saved[0] - per_sample, tokens * config.hidden_size * 4


def head_activation_bytes(model, input_size, batch: int, bf16: bool) -> int:
    """Saved bytes of the task head for ``batch`` samples (counted on the meta device)."""
    config = model.config
    h, w = input_size[0] // config.patch_size, input_size[1] // config.patch_size
    with torch.device("meta"):
        features = torch.empty(batch, config.hidden_size, h, w, requires_grad=True)
        saved = _saved_bytes(lambda: model.decode_head(features))
        if getattr(model, "scale_head", None) is not None and not isinstance(model.scale_head, torch.nn.Identity):
            saved += _saved_bytes(lambda: model.scale_head(features))
    return saved // 2 if bf16 else saved


def estimate(setup: Setup) -> Estimate:
    labels = list(task_spec(setup.task).model.outputs) or [f"label_{i}" for i in range(setup.num_labels)]
    frozen_dtype = None if setup.frozen_dtype == "float32" else getattr(torch, setup.frozen_dtype)
    with torch.device("meta"):
        model, _ = build_task_model(setup.task, labels, setup.input_size, size=setup.size, head=setup.head)
        adapt(model, setup.freeze, setup.freeze_blocks, setup.lora, frozen_dtype)
    config = model.config
    num_params = sum(p.numel() for p in model.parameters())
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    frozen_bytes = sum(p.numel() * p.element_size() for p in model.parameters() if not p.requires_grad)
    blocks = [m for m in model.modules() if isinstance(m, Sapiens2Layer)]
    block_params = max(sum(p.numel() for p in b.parameters()) for b in blocks)
    sharded = setup.strategy == "fsdp2"
    shard = setup.world_size if sharded else 1
    on_device = 0.0 if (sharded and setup.cpu_offload) else 1.0
    compute_bytes = 2 if setup.bf16 else 4
    if sharded:
        root_params = num_params - sum(sum(p.numel() for p in b.parameters()) for b in blocks)
        buffers = (2 * block_params + root_params) * compute_bytes
    else:
        buffers = 4 * trainable if setup.strategy == "ddp" else 0

    num_full = config.num_first_full_attention_layers + config.num_last_full_attention_layers
    num_full = min(num_full, config.num_hidden_layers)
    full = block_activation_bytes(config, 0, setup.input_size, setup.bf16, setup.lora, setup.frozen_dtype)
    gqa = full
    if num_full < config.num_hidden_layers:
        gqa = block_activation_bytes(config, config.num_first_full_attention_layers, setup.input_size, setup.bf16,
                                     setup.lora, setup.frozen_dtype)
    b = setup.batch_size * (2 if setup.unlabeled else 1)  # the student's images in one step
    head = head_activation_bytes(model, setup.input_size, b, setup.bf16)
    first = config.num_first_full_attention_layers
    last = config.num_hidden_layers - config.num_last_full_attention_layers
    frozen = frozen_blocks(setup, config.num_hidden_layers)  # no gradient reaches them: nothing saved
    layers = [(0, 0, 0) if i < frozen else full if i < first or i >= last else gqa
              for i in range(config.num_hidden_layers)]
    activations = sum(b * per_sample + fixed for per_sample, fixed, _ in layers) + head
    every = setup.checkpoint_every
    if every > 0:  # a checkpointed block keeps its (fp32 residual) input; backward recomputes one block at a time
        kept = sum(b * per_sample + fixed for i, (per_sample, fixed, _) in enumerate(layers) if i % every != 0)
        inputs = sum(b * block_input for i, (_, _, block_input) in enumerate(layers) if i % every == 0 and i >= frozen)
        recompute = max(b * per_sample + fixed for per_sample, fixed, _ in layers)
        checkpointed = kept + inputs + recompute + head
    else:
        checkpointed = activations
    teacher = teacher_bytes(setup, labels, b, shard, compute_bytes) if setup.teacher_size else (0, 0.0, 0.0)
    return Estimate(
        teacher_num_params=teacher[0], teacher_params=teacher[1], teacher_activations=teacher[2],
        params=on_device * (4 * trainable + frozen_bytes) / shard,
        grads=on_device * 4 * trainable / shard,
        optimizer=on_device * 8 * trainable / shard,
        buffers=buffers,
        activations=activations,
        activations_checkpointed=checkpointed,
        num_params=num_params,
        trainable_params=trainable,
        frozen_bytes=on_device * frozen_bytes / shard,
    )


def teacher_bytes(setup: Setup, labels: list[str], images: int, shard: int, compute_bytes: int
                  ) -> tuple[int, float, float]:
    """(parameters, bytes of its weights on a device, bytes of its inference activations) of the teacher: frozen,
    in the compute dtype, sharded under FSDP2 (plus two gathered blocks and the root); inference keeps one block's
    activations at a time, for ``images`` images."""
    with torch.device("meta"):
        teacher, _ = build_task_model(setup.task, labels, setup.input_size, size=setup.teacher_size)
    config = teacher.config
    count = sum(p.numel() for p in teacher.parameters())
    blocks = [m for m in teacher.modules() if isinstance(m, Sapiens2Layer)]
    weights = count * compute_bytes / shard
    if shard > 1:
        block = max(sum(p.numel() for p in b.parameters()) for b in blocks)
        weights += (2 * block + count - sum(sum(p.numel() for p in b.parameters()) for b in blocks)) * compute_bytes
    per_sample, fixed, _ = block_activation_bytes(config, 0, setup.input_size, setup.bf16)
    outputs = head_activation_bytes(teacher, setup.input_size, images, setup.bf16)
    return count, weights, images * per_sample + fixed + outputs


def frozen_blocks(setup: Setup, num_blocks: int) -> int:
    """How many leading blocks have no trainable parameter before them or in them."""
    if setup.freeze == "backbone":
        return num_blocks
    return setup.freeze_blocks if setup.freeze == "first_n_blocks" else 0


# --------------------------------------------------------------------------- reading a config


def _size_of_pretrained(pretrained: str) -> str:
    if Path(pretrained).is_dir():
        config = Sapiens2Config.from_pretrained(pretrained, trust_remote_code=False)
        size = presets.size_of(config.hidden_size, config.num_hidden_layers)
        if size is None:
            raise BadConfig(f"{pretrained}: hidden {config.hidden_size} x {config.num_hidden_layers} layers is not "
                            f"a Sapiens2 size preset")
        return size
    match = re.search(r"(0\.1b|0\.4b|0\.8b|1b|5b)", pretrained)
    if not match:
        raise BadConfig(f"cannot tell the model size of '{pretrained}'; set --model.size")
    return match.group(1)


def _strategy_name(strategy) -> str:
    text = str(getattr(strategy, "class_path", strategy)).lower()
    if "fsdp" in text or "modelparallel" in text:
        return "fsdp2"
    return "ddp" if "ddp" in text else "single"


def setup_from_config(argv: list[str], world_size: int | None) -> Setup:
    """Parse ``argv`` exactly as ``train.py`` does (nothing is instantiated) into a :class:`Setup`."""
    from sapiens2_ft.training.cli import Sapiens2CLI, resolve_config_args, task_of

    class ParseOnly(Sapiens2CLI):
        def before_instantiate_classes(self) -> None:
            pass

        def instantiate_classes(self) -> None:
            pass

    argv = resolve_config_args(argv)
    task = task_of(argv)
    warnings.filterwarnings("ignore", message="LightningCLI's args parameter is intended")
    cli = ParseOnly(task, args=argv, run=False)
    c = cli.config
    model, data, trainer = c.model, c.data, c.trainer
    size = _size_of_pretrained(model.pretrained) if model.pretrained else model.size
    label_arg = task_spec(task).model.label_arg
    num_labels = len(label_names(task, getattr(model, label_arg) if label_arg else None))
    if world_size is None:
        devices = trainer.devices if isinstance(trainer.devices, int) else 1
        world_size = devices * (trainer.num_nodes or 1)
    scale = model.scale
    precision = str(trainer.precision or "bf16-mixed")  # unset: bf16-mixed on GPU
    strategy = _strategy_name(trainer.strategy)
    if strategy == "single" and world_size > 1:
        strategy = "ddp"
    lora = model.lora
    frozen = frozen_storage(model.frozen_dtype, precision)
    distill = model.get("distill")
    teacher = distill.teacher if distill is not None else None
    return Setup(task=task, size=size, num_labels=num_labels, input_size=tuple(data.input_size),
                 batch_size=data.batch_size, world_size=world_size, strategy=strategy,
                 bf16="bf16" in precision, checkpoint_every=scale.activation_checkpointing or 0,
                 cpu_offload=bool(scale.cpu_offload), freeze=model.freeze or "none",
                 freeze_blocks=model.freeze_blocks or 0,
                 lora=LoraOptions(**vars(lora)) if lora is not None and not isinstance(lora, LoraOptions) else lora,
                 frozen_dtype=str(frozen).removeprefix("torch.") if frozen is not None else "float32",
                 head=dict(model.head) if model.head else None,
                 teacher_size=_size_of_pretrained(teacher) if teacher else None, unlabeled=bool(data.get("unlabeled")))


def report(setup: Setup, est: Estimate, device_memory_gb: float) -> str:
    s = setup
    trainable = est.trainable_params or est.num_params
    lines = [
        f"{s.task} {s.size} ({est.num_params / 1e9:.3f} B parameters), input {s.input_size[0]}x{s.input_size[1]}, "
        f"batch {s.batch_size} per device, {s.strategy} on {s.world_size} device(s), "
        f"{'bf16' if s.bf16 else 'fp32'}{', CPU offload' if s.cpu_offload else ''}",
        f"  training {fine_tuning(s)}: {trainable / 1e6:,.1f} M parameters ({100 * trainable / est.num_params:.2f}%)",
        f"  parameters                   {est.params / GIB:8.2f} GiB"
        + (f" (frozen: {est.frozen_bytes / GIB:.2f} GiB, linear weights in {s.frozen_dtype}; trained: fp32)"
           if est.frozen_bytes and s.frozen_dtype != "float32" else " (fp32)"),
        f"  gradients (fp32)             {est.grads / GIB:8.2f} GiB",
        f"  AdamW state (fp32)           {est.optimizer / GIB:8.2f} GiB",
        f"  {'gathered params (FSDP2)' if s.strategy == 'fsdp2' else 'gradient buckets (DDP)':<28} "
        f"{est.buffers / GIB:8.2f} GiB",
        f"  activations                  {est.activations / GIB:8.2f} GiB",
        f"  activations, checkpointing   {est.activations_checkpointed / GIB:8.2f} GiB"
        f" (every {max(s.checkpoint_every, 1)} block{'s' if max(s.checkpoint_every, 1) > 1 else ''})",
    ]
    if s.teacher_size:
        lines += [f"  teacher {s.teacher_size} ({est.teacher_num_params / 1e9:.3f} B, frozen, "
                  f"{'bf16' if s.bf16 else 'fp32'}, no gradients or optimiser state)",
                  f"    its weights{' (sharded + gathered)' if s.strategy == 'fsdp2' else '':<18}"
                  f"{est.teacher_params / GIB:8.2f} GiB",
                  f"    its inference activations  {est.teacher_activations / GIB:8.2f} GiB"
                  + (" (labelled + unlabelled images)" if s.unlabeled else "")]
    usable = HEADROOM * device_memory_gb * GIB
    for checkpointed in (False, True):
        total = est.total(checkpointed)
        verdict = "fits" if total <= usable else "does NOT fit"
        lines.append(f"  total {'with' if checkpointed else 'without':<7} checkpointing {total / GIB:8.2f} GiB -> "
                     f"{verdict} in {device_memory_gb:g} GB ({HEADROOM:.0%} usable)")
    return "\n".join(lines)


def fine_tuning(setup: Setup) -> str:
    """'all', 'the head', 'LoRA r16 + the head', ... of a setup."""
    if setup.lora is not None and setup.lora.rank > 0:
        return f"LoRA r{setup.lora.rank} + the head"
    if setup.freeze == "backbone":
        return "the head"
    if setup.freeze == "first_n_blocks":
        return f"all but the first {setup.freeze_blocks} blocks"
    return "all"


TABLE_SIZES = ("0.4b", "1b", "5b")
TABLE_GPUS_GB = (24, 48, 80)


def verdict_table(setup: Setup, lora_rank: int = 16) -> str:
    """Markdown: total GiB with activation checkpointing on one GPU, per size and way of fine-tuning, and on which
    of 24 / 48 / 80 GB it fits, for the setup's task, input and batch."""
    ways = _ways(lora_rank)
    rows = ["| size | fine-tuned | trains | total (GiB) | " + " | ".join(f"{g} GB" for g in TABLE_GPUS_GB) + " |",
            "|---|---|---|---|" + "---|" * len(TABLE_GPUS_GB)]
    for size in TABLE_SIZES:
        for name, way in ways.items():
            one = Setup(**{**vars(setup), "size": size, "world_size": 1, "strategy": "single", "cpu_offload": False,
                           "checkpoint_every": 1, "freeze_blocks": 0, **way})
            print(f"measuring {size}, {name} ...", file=sys.stderr)
            est = estimate(one)
            total = est.total(checkpointed=True)
            fits = ["fits" if total <= HEADROOM * g * GIB else "no" for g in TABLE_GPUS_GB]
            rows.append(f"| {size} | {name} | {est.trainable_params / 1e6:,.1f} M | {total / GIB:.1f} | "
                        + " | ".join(fits) + " |")
    return "\n".join(rows)


def _ways(lora_rank: int) -> dict[str, dict]:
    return {"all": dict(freeze="none", lora=None), "head only": dict(freeze="backbone", lora=None),
            f"LoRA r{lora_rank}": dict(freeze="none", lora=LoraOptions(rank=lora_rank, alpha=2.0 * lora_rank))}


def largest_batch(setup: Setup, device_memory_gb: float) -> int:
    """The largest per-device batch whose estimate (checkpointing as in ``setup``) fits ``device_memory_gb``
    (0: not even batch 1). The estimate is linear in the batch, so two estimates give it."""
    one, two = (estimate(Setup(**{**vars(setup), "batch_size": b})).total(checkpointed=True) for b in (1, 2))
    slope, fixed = two - one, 2 * one - two
    return max(0, int((HEADROOM * device_memory_gb * GIB - fixed) // slope))


def batch_table(setup: Setup, lora_rank: int = 16) -> str:
    """Markdown: the largest batch on one 24 / 48 / 80 GB GPU per size and way of fine-tuning (every block
    checkpointed; the setup's task, input, precision and frozen dtype)."""
    ways = _ways(lora_rank)
    rows = ["| GPU | " + " | ".join(f"{size} {name}" for size in TABLE_SIZES for name in ways) + " | largest model |",
            "|---|" + "---|" * (len(TABLE_SIZES) * len(ways) + 1)]
    for gb in TABLE_GPUS_GB:
        cells, largest = [], "-"
        for size in TABLE_SIZES:
            for name, way in ways.items():
                one = Setup(**{**vars(setup), "size": size, "world_size": 1, "strategy": "single",
                               "cpu_offload": False, "checkpoint_every": 1, "freeze_blocks": 0, **way})
                batch = largest_batch(one, gb)
                cells.append(str(batch) if batch else "-")
                if batch:
                    largest = size
        rows.append(f"| {gb} GB | " + " | ".join(cells) + f" | {largest} |")
    return "\n".join(rows)


@console_command
def main(argv: list[str] | None = None) -> Estimate:
    parser = argparse.ArgumentParser(
        prog="python -m sapiens2_ft.memory", description=__doc__.splitlines()[0],
        epilog="Besides these, it takes train.py's --config files and --key value overrides (python train.py --help "
               "lists every key), e.g. --data.batch_size 4 --trainer.precision bf16-mixed.")
    parser.add_argument("--world_size", type=int, default=None, help="devices in total (default: from the config)")
    parser.add_argument("--device_memory_gb", type=float, default=80.0, help="memory of one device")
    parser.add_argument("--activation_checkpointing", type=int, default=None,
                        help="estimate with checkpointing of every n-th block (default: the config's, or 1)")
    parser.add_argument("--table", action="store_true",
                        help="also print what fits on one 24 / 48 / 80 GB GPU for 0.4b, 1b and 5b, fine-tuned fully, "
                             "head only and with LoRA r16 (the config's task, input and batch)")
    parser.add_argument("--batch_table", action="store_true",
                        help="also print the largest batch on one 24 / 48 / 80 GB GPU for 0.4b, 1b and 5b, fine-tuned "
                             "fully, head only and with LoRA r16 (the config's task, input and precision)")
    args, rest = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    from sapiens2_ft.training.cli import resolve_config_args

    problems = Problems()
    problems.check(args.world_size is None or args.world_size >= 1,
                   f"--world_size: give the devices in total (>= 1), got {args.world_size}")
    problems.check(args.device_memory_gb > 0, f"--device_memory_gb: must be > 0, got {args.device_memory_gb}")
    problems.check(args.activation_checkpointing is None or args.activation_checkpointing >= 0,
                   f"--activation_checkpointing: every n-th block, n >= 1 (0: none), got {args.activation_checkpointing}")
    try:
        resolve_config_args(rest)
    except NotFound as err:
        problems.append(str(err))
    problems.raise_any()
    setup = setup_from_config(rest, args.world_size)
    if args.activation_checkpointing is not None:
        setup.checkpoint_every = args.activation_checkpointing
    elif setup.checkpoint_every == 0:
        setup.checkpoint_every = 1
    print(f"measuring one {setup.size} block at {setup.input_size[0]}x{setup.input_size[1]} on the CPU ...",
          file=sys.stderr)
    est = estimate(setup)
    print(report(setup, est, args.device_memory_gb))
    if args.table:
        print(verdict_table(setup))
    if args.batch_table:
        print(batch_table(setup))
    return est


if __name__ == "__main__":
    main()
