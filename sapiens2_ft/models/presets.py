"""Backbone sizes of the Sapiens2 family: hidden size, depth and heads per size (SwiGLU MLP at 4x hidden,
grouped-query attention with half the heads in the middle layers, full attention in the first and last 8;
``tiny`` and ``mini`` are CPU-sized, for tests and the demos). The task heads' layouts are the tasks'
(``sapiens2_ft/tasks/heads.py``).
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


def size_of(hidden_size: int, num_hidden_layers: int) -> str | None:
    """The preset name of a backbone with these dimensions, if it is one of the family."""
    for name, kw in BACKBONES.items():
        if kw["hidden_size"] == hidden_size and kw["num_hidden_layers"] == num_hidden_layers:
            return name
    return None
