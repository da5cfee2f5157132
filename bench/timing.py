"""Timing helpers of the benchmark scripts: medians of repeated calls, and two sides timed in alternation so
that load changes on a shared machine hit both."""

from __future__ import annotations

import statistics
import time
from typing import Callable


def seconds(work: Callable[[], object]) -> float:
    start = time.perf_counter()
    work()
    return time.perf_counter() - start


def median_seconds(work: Callable[[], object], repeats: int) -> float:
    """The median time of ``repeats`` calls of ``work``, after one call to warm up."""
    work()
    return statistics.median(seconds(work) for _ in range(repeats))


def paired(a: Callable[[], object], b: Callable[[], object], rounds: int) -> tuple[float, float, float]:
    """``a`` and ``b`` called in alternation ``rounds`` times, after one warm-up call each: (median time of ``a``,
    median time of ``b``, median of the per-pair ratios b / a)."""
    a(), b()
    pairs = [(seconds(a), seconds(b)) for _ in range(rounds)]
    return (statistics.median(p[0] for p in pairs), statistics.median(p[1] for p in pairs),
            statistics.median(p[1] / p[0] for p in pairs))
