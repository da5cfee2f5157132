"""Whether this CPU has native bf16 dot products (``avx512_bf16`` or AMX): there oneDNN runs bf16 matmuls at 3-4x
the fp32 rate; elsewhere bf16 is emulated and far slower than fp32 (``bench/cpu_mfu.py`` measures both). Read by the
CPU's training precision (``training/cpu_precision.py``) and a teacher's inference precision (``tasks/distill.py``).
Imports nothing of this project."""

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
