"""OpenCV's code paths, switchable in one process: a host takes one of them (IPP, the SIMD level its CPU has, or
plain C++), and data that depends on which one would differ between machines. Tests of the data layer run under
each (the ``opencv_path`` fixture) so that one machine checks more than its own path."""

from __future__ import annotations

import cv2
import pytest

PATHS = {"ipp+simd": (True, True), "simd": (True, False), "plain": (False, False)}  # (optimised, IPP)


def set_path(name: str) -> None:
    optimized, ipp = PATHS[name]
    cv2.setUseOptimized(optimized)
    cv2.ipp.setUseIPP(ipp)


@pytest.fixture(params=list(PATHS))
def opencv_path(request):
    """Runs a test under one of OpenCV's code paths; the default (everything on) comes back after it."""
    set_path(request.param)
    yield request.param
    set_path("ipp+simd")
