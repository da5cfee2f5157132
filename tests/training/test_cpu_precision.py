"""The CPU precision of the demo pretraining: bf16 autocast exactly where the CPU has native bf16."""

from __future__ import annotations

import pytest

from sapiens2_ft.training.cpu_precision import cpu_precision, native_bf16

AVX2_ONLY = "flags\t\t: fpu sse sse2 avx avx2 fma bmi2\n"
AVX512_BF16 = "flags\t\t: fpu sse sse2 avx avx2 avx512f avx512bw avx512_vnni avx512_bf16\n"
AMX = "flags\t\t: fpu avx2 avx512f amx_tile amx_bf16 amx_int8\n"


@pytest.mark.parametrize("cpuinfo, native", [(AVX2_ONLY, False), (AVX512_BF16, True), (AMX, True),
                                             ("flags : avx512f avx512_bf16x\n", False)])
def test_native_bf16_reads_the_cpu_flags_both_ways(cpuinfo, native):
    assert native_bf16(cpuinfo) is native
    assert cpu_precision("auto", cpuinfo) == ("bf16-mixed" if native else "32-true")


def test_a_given_precision_is_kept_on_any_cpu():
    for cpuinfo in (AVX2_ONLY, AVX512_BF16):
        assert cpu_precision("32-true", cpuinfo) == "32-true"
        assert cpu_precision("bf16-mixed", cpuinfo) == "bf16-mixed"

