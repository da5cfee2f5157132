"""The CPU's bf16 path: whether it has native bf16 dot products, and the training precision that follows.

On CPUs with ``avx512_bf16`` or AMX, oneDNN runs bf16 matmuls at 3-4x the fp32 rate, so bf16 autocast is the
biggest lever of a CPU run; elsewhere bf16 is emulated and far slower than fp32 (``bench/cpu_mfu.py``
measures both). Whether it has them: ``models/cpu_bf16.py``.
"""

from __future__ import annotations

from sapiens2_ft.models.cpu_bf16 import NATIVE_BF16_FLAGS, native_bf16

__all__ = ["NATIVE_BF16_FLAGS", "cpu_precision", "native_bf16"]


def cpu_precision(requested: str, cpuinfo: str | None = None) -> str:
    """``trainer.precision`` for a CPU run: ``auto`` is ``bf16-mixed`` on a CPU with native bf16, else
    ``32-true``; any other value is returned as given."""
    if requested != "auto":
        return requested
    return "bf16-mixed" if native_bf16(cpuinfo) else "32-true"
