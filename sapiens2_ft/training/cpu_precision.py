"""The CPU's bf16 path: whether it has native bf16 dot products, and the training precision that follows.

On CPUs with ``avx512_bf16`` or AMX, oneDNN runs bf16 matmuls at 3-4x the fp32 rate, so bf16 autocast is the
biggest lever of a CPU run; elsewhere bf16 is emulated and far slower than fp32 (``bench/cpu_mfu.py``
measures both). Imports nothing of this project.
"""

from __future__ import annotations

from pathlib import Path

NATIVE_BF16_FLAGS = ("avx512_bf16", "amx_bf16")


def native_bf16(cpuinfo: str | None = None) -> bool:
    """Whether the CPU lists a native bf16 flag (``lscpu``'s flags; ``cpuinfo``: that text, else /proc/cpuinfo)."""
    if cpuinfo is None:
        try:
            cpuinfo = Path("/proc/cpuinfo").read_text()
        except OSError:
            return False
    flags = set(cpuinfo.split())
    return any(flag in flags for flag in NATIVE_BF16_FLAGS)


def cpu_precision(requested: str, cpuinfo: str | None = None) -> str:
    """``trainer.precision`` for a CPU run: ``auto`` is ``bf16-mixed`` on a CPU with native bf16, else
    ``32-true``; any other value is returned as given."""
    if requested != "auto":
        return requested
    return "bf16-mixed" if native_bf16(cpuinfo) else "32-true"
