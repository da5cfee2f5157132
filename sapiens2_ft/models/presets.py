"""Backbone sizes and task-head layouts of the Sapiens2 family.

Backbones: hidden size, depth and heads per size (SwiGLU MLP at 4x hidden, grouped-query attention with half
the heads in the middle layers, full attention in the first and last 8; ``tiny`` and ``mini`` are CPU-sized,
for tests and the demos).
Heads: the layouts of the released task checkpoints, so a head built for a pretrain-only
backbone has the shape the released fine-tuned models have.
"""

from __future__ import annotations

BACKBONES: dict[str, dict] = {
    "tiny": dict(
        hidden_size=128, num_hidden_layers=4, num_attention_heads=4, intermediate_size=512,
        num_register_tokens=4, num_key_value_attention_heads=2,
        num_first_full_attention_layers=1, num_last_full_attention_layers=1,
    ),
    # The demo backbone (assets/sapiens2-mini-synthetic, pretrained by tools/pretrain_demo_backbone.py).
    "mini": dict(
        hidden_size=160, num_hidden_layers=6, num_attention_heads=4, intermediate_size=640,
        num_register_tokens=4, num_key_value_attention_heads=2,
        num_first_full_attention_layers=1, num_last_full_attention_layers=1,
    ),
    "0.1b": dict(hidden_size=768, num_hidden_layers=12, num_attention_heads=12),
    "0.4b": dict(hidden_size=1024, num_hidden_layers=24, num_attention_heads=16),
    "0.8b": dict(hidden_size=1280, num_hidden_layers=32, num_attention_heads=16),
    "1b": dict(hidden_size=1536, num_hidden_layers=40, num_attention_heads=24),
    "5b": dict(hidden_size=2432, num_hidden_layers=56, num_attention_heads=32),
}
for _size, _kw in BACKBONES.items():
    _kw.setdefault("intermediate_size", 4 * _kw["hidden_size"])
    _kw.setdefault("num_key_value_attention_heads", _kw["num_attention_heads"] // 2)
    _kw.setdefault("num_register_tokens", 8)
    _kw.setdefault("num_first_full_attention_layers", 8)
    _kw.setdefault("num_last_full_attention_layers", 8)

_POSE_DEFAULT = dict(upsample_out_channels=[1024, 768], conv_out_channels=[512, 512, 256])
_DENSE_SHUFFLE = dict(use_pixel_shuffle=True, upsample_kernel_size=3, upsample_out_channels=[768, 512, 256, 128],
                      conv_kernel_size=3, conv_out_channels=[64, 32, 16])
_DENSE_SHUFFLE_5B = {**_DENSE_SHUFFLE, "upsample_out_channels": [1536, 768, 512, 256],
                     "conv_out_channels": [128, 64, 32]}
_TINY_SHUFFLE = dict(use_pixel_shuffle=True, upsample_kernel_size=3, upsample_out_channels=[64, 32],
                     conv_kernel_size=3, conv_out_channels=[32])
# Pointmap scale branch: stride-2 1x1 convs, then an MLP to one scalar (input size set from image_size).
_SCALE = dict(scale_conv_out_channels=[1536, 512, 128], scale_conv_kernel_size=1, scale_final_hidden_sizes=[512, 128])
_TINY_SCALE = dict(scale_conv_out_channels=[32, 16], scale_conv_kernel_size=1, scale_final_hidden_sizes=[32, 16])

HEADS: dict[str, dict[str, dict]] = {
    "pose": {
        **{size: dict(upsample_out_channels=[64, 64], conv_out_channels=[64]) for size in ("tiny", "mini")},
        "0.1b": _POSE_DEFAULT, "0.4b": _POSE_DEFAULT, "0.8b": _POSE_DEFAULT, "5b": _POSE_DEFAULT,
        "1b": dict(upsample_out_channels=[1536, 1024], conv_out_channels=[768, 512, 256]),
    },
    # Tiny heads upsample 4x (the modules resize outputs to the target bilinearly): CPU demos stay fast.
    "seg": {
        **{size: dict(upsample_out_channels=[64, 32], conv_out_channels=[32]) for size in ("tiny", "mini")},
        **{size: dict(upsample_out_channels=[512, 256, 128, 64], conv_out_channels=[64, 64])
           for size in ("0.1b", "0.4b", "0.8b", "1b", "5b")},
    },
    "normal": {"tiny": _TINY_SHUFFLE, "mini": _TINY_SHUFFLE, **{size: _DENSE_SHUFFLE for size in ("0.1b", "0.4b", "0.8b", "1b")},
               "5b": _DENSE_SHUFFLE_5B},
    "matting": {"tiny": _TINY_SHUFFLE, "mini": _TINY_SHUFFLE, **{size: _DENSE_SHUFFLE for size in ("0.1b", "0.4b", "0.8b", "1b")},
                "5b": _DENSE_SHUFFLE_5B},
    "pointmap": {
        **{size: {**_TINY_SHUFFLE, **_TINY_SCALE} for size in ("tiny", "mini")},
        **{size: {**_DENSE_SHUFFLE, "upsample_out_channels": [1536, 768, 512, 256], **_SCALE}
           for size in ("0.1b", "0.4b", "0.8b", "1b")},
        "5b": {**_DENSE_SHUFFLE_5B, "upsample_out_channels": [1536, 768, 768, 768], **_SCALE},
    },
}


def size_of(hidden_size: int, num_hidden_layers: int) -> str | None:
    """The preset name of a backbone with these dimensions, if it is one of the family."""
    for name, kw in BACKBONES.items():
        if kw["hidden_size"] == hidden_size and kw["num_hidden_layers"] == num_hidden_layers:
            return name
    return None


def head_layout(task: str, size: str | None) -> dict:
    """Head config kwargs for ``task`` at ``size`` (the 0.4b layout when the size is unknown)."""
    if task not in HEADS:
        raise ValueError(f"no head layouts for task '{task}'; known: {sorted(HEADS)}")
    return dict(HEADS[task].get(size or "0.4b", HEADS[task]["0.4b"]))
