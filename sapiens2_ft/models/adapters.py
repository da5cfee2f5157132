"""Parameter-efficient fine-tuning: a frozen backbone (or its first blocks), and LoRA adapters (``peft``) on the
backbone's attention and MLP linear layers. The head always trains in full.

Frozen weights need no fp32 copy: ``frozen_dtype`` stores the frozen linear layers' weights and biases in the
dtype autocast computes them in (``bfloat16`` under ``bf16-mixed``), so the forward pass is the one of
fp32-stored weights (autocast rounds them to that dtype anyway) at half the memory, and autograd saves the
stored weights instead of a bf16 copy per layer. Norms, layer scales, tokens and the patch embedding (whose
dtype sets the RoPE tables'; together under 1% of a backbone) stay fp32, as do all trained parameters (fp32
masters, AdamW state for them only).

``adapt`` runs on the freshly built model, before activation checkpointing and FSDP2 sharding, and on every
rank's meta-device copy alike, so the parameter names and shapes agree everywhere. ``merge_lora`` folds trained
adapters into plain weights (``W + alpha / r x B A``) for export.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch
from torch import nn

FREEZE_MODES = ("none", "backbone", "first_n_blocks")
FROZEN_DTYPES = ("auto", "float32", "bfloat16", "float16")
AUTOCAST_DTYPES = {"bf16-mixed": torch.bfloat16, "16-mixed": torch.float16}  # trainer.precision -> compute dtype
PRECISION_ALIASES = {"bf16": "bf16-mixed", "16": "16-mixed", "32": "32-true"}  # Lightning's short forms
ADAPTER = "default"  # peft's adapter name in the parameter names
_LORA_KEY = re.compile(rf"^(.*)\.lora_([AB])\.{ADAPTER}\.weight$")


@dataclass
class LoraOptions:
    """LoRA adapters on the backbone (``model.lora.*``).

    Args:
        rank: Adapter rank r; 0 turns LoRA off. With LoRA the backbone's own weights are frozen.
        alpha: Scale numerator: an adapter adds ``alpha / rank x B A`` to its layer's weight.
        dropout: Dropout on the adapters' input during training.
        target_modules: The linear layers of each transformer block that get adapters (attention
            ``q_proj``, ``k_proj``, ``v_proj``, ``o_proj``; MLP ``gate_proj``, ``up_proj``, ``down_proj``).
    """

    rank: int = 0
    alpha: float = 16.0
    dropout: float = 0.0
    target_modules: list[str] = field(default_factory=lambda: ["q_proj", "k_proj", "v_proj", "o_proj",
                                                                "gate_proj", "up_proj", "down_proj"])


def backbone_of(model: nn.Module) -> nn.Module:
    """The ``Sapiens2Model`` inside a task model (the model itself when it is one)."""
    from transformers import Sapiens2Model

    if isinstance(model, Sapiens2Model):
        return model
    found = [m for m in model.modules() if isinstance(m, Sapiens2Model)]
    if not found:
        raise ValueError(f"{type(model).__name__} has no Sapiens2Model backbone")
    return found[0]


def _block_index(name: str) -> int | None:
    match = re.search(r"(?:^|\.)layer\.(\d+)\.", name)
    return int(match.group(1)) if match else None


def adapt(model: nn.Module, freeze: str = "none", freeze_blocks: int = 0, lora: LoraOptions | None = None,
          frozen_dtype: torch.dtype | None = None) -> None:
    """Freeze and / or add LoRA adapters in place, then store the frozen layers' weights in ``frozen_dtype``
    (None: as they are; see the module docstring and :func:`frozen_storage`)."""
    _adapt(model, freeze, freeze_blocks, lora)
    if frozen_dtype is not None:
        store_frozen(model, frozen_dtype)


def _adapt(model: nn.Module, freeze: str, freeze_blocks: int, lora: LoraOptions | None) -> None:
    if freeze not in FREEZE_MODES:
        raise ValueError(f"model.freeze: '{freeze}' is not one of {', '.join(FREEZE_MODES)}")
    backbone = backbone_of(model)
    num_blocks = backbone.config.num_hidden_layers
    if freeze == "first_n_blocks" and not 0 < freeze_blocks <= num_blocks:
        raise ValueError(f"model.freeze_blocks: {freeze_blocks} is not between 1 and the backbone's {num_blocks} "
                         f"blocks (model.freeze: first_n_blocks)")
    if lora is not None and lora.rank > 0:
        if freeze != "none":
            raise ValueError(f"model.freeze: '{freeze}' with model.lora.rank {lora.rank}: LoRA already freezes the "
                             f"backbone's weights; set model.freeze: none")
        add_lora(backbone, lora)
        return
    for name, param in backbone.named_parameters():
        if freeze == "backbone":
            param.requires_grad_(False)
        elif freeze == "first_n_blocks":
            block = _block_index(name)
            if (block is None and name.startswith("embeddings.")) or (block is not None and block < freeze_blocks):
                param.requires_grad_(False)


def add_lora(backbone: nn.Module, lora: LoraOptions) -> None:
    """peft LoRA layers on ``lora.target_modules`` of every block; the backbone's other weights frozen."""
    from peft import LoraConfig, inject_adapter_in_model

    names = "|".join(re.escape(t) for t in lora.target_modules)
    config = LoraConfig(r=lora.rank, lora_alpha=lora.alpha, lora_dropout=lora.dropout, bias="none",
                        target_modules=rf".*layer\.\d+\.(?:attention|mlp)\.(?:{names})")
    linear = {name.rpartition(".")[2] for name, m in backbone.named_modules()
              if isinstance(m, nn.Linear) and _block_index(name) is not None}
    unknown = sorted(set(lora.target_modules) - linear)
    if unknown or not lora.target_modules:
        raise ValueError(f"model.lora.target_modules: {unknown or '[]'} not among the blocks' linear layers "
                         f"{sorted(linear)}")
    with torch.random.fork_rng(devices=[]):  # adapters drawn from the run's seed: the same under any strategy
        torch.manual_seed(torch.initial_seed())
        inject_adapter_in_model(config, backbone, adapter_name=ADAPTER)
    for name, param in backbone.named_parameters():
        param.requires_grad_(".lora_" in name)


def frozen_storage(option: str, precision: str | None) -> torch.dtype | None:
    """The dtype to store frozen weights in (None: float32, as loaded) for ``model.frozen_dtype`` ``option`` and
    the trainer's ``precision`` (None: no trainer). ``auto`` is the precision's autocast dtype; an explicit
    half dtype needs that autocast, which computes the frozen layers in it."""
    if option not in FROZEN_DTYPES:
        raise ValueError(f"model.frozen_dtype: '{option}' is not one of {', '.join(FROZEN_DTYPES)}")
    if precision is not None:
        precision = PRECISION_ALIASES.get(str(precision), str(precision))
    compute = AUTOCAST_DTYPES.get(precision) if precision is not None else None
    if option == "auto":
        return compute
    if option == "float32":
        return None
    wanted = getattr(torch, option)
    if precision is not None and compute != wanted:
        needed = next(k for k, v in AUTOCAST_DTYPES.items() if v == wanted)
        raise ValueError(f"model.frozen_dtype: {option} is computed under {needed} autocast, but trainer.precision "
                         f"is '{precision}'; set trainer.precision: {needed}, or model.frozen_dtype: auto")
    return wanted if precision is not None else None


def store_frozen(model: nn.Module, dtype: torch.dtype) -> int:
    """Cast the frozen weights and biases of the linear layers to ``dtype`` in place (autocast's compute dtype for
    them); returns how many parameters were cast. Trained parameters are left as they are."""
    cast = 0
    for module in model.modules():
        if isinstance(module, nn.Linear):
            for param in module.parameters(recurse=False):
                if not param.requires_grad and param.dtype != dtype:
                    param.data = param.data.to(dtype)
                    cast += param.numel()
    return cast


def storage_summary(model: nn.Module) -> str:
    """Parameters per dtype and whether they train: '12,345 bfloat16 frozen, 678 float32 trained'."""
    counts: dict[tuple[str, str], int] = {}
    for param in model.parameters():
        key = (str(param.dtype).removeprefix("torch."), "trained" if param.requires_grad else "frozen")
        counts[key] = counts.get(key, 0) + param.numel()
    return ", ".join(f"{n:,} {dtype} {kind}" for (dtype, kind), n in sorted(counts.items(), key=lambda kv: -kv[1]))


def trainable_summary(model: nn.Module) -> str:
    """'T of N parameters train (x%)'."""
    total = sum(p.numel() for p in model.parameters())
    trained = sum(p.numel() for p in model.parameters() if p.requires_grad)
    return f"{trained:,} of {total:,} parameters train ({100 * trained / max(total, 1):.2f}%)"


def merge_lora(state: dict[str, torch.Tensor], alpha: float, rank: int) -> dict[str, torch.Tensor]:
    """Model weights with LoRA adapters (peft names) -> the same weights with each adapter folded into its layer:
    ``X.base_layer.weight + alpha / rank x X.lora_B @ X.lora_A`` becomes ``X.weight``."""
    scale = alpha / rank
    merged = {}
    for key, value in state.items():
        if _LORA_KEY.match(key):
            continue
        if ".base_layer." in key:
            prefix, _, leaf = key.partition(".base_layer.")
            if leaf == "weight":
                a, b = state[f"{prefix}.lora_A.{ADAPTER}.weight"], state[f"{prefix}.lora_B.{ADAPTER}.weight"]
                value = value.float() + scale * (b.float() @ a.float())
            key = f"{prefix}.{leaf}"
        merged[key] = value
    return merged
