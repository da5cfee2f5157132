"""Temporal smoothing of video predictions (``predict --smooth``, ``Predictor.stream(smooth=...)``).

Keypoints: the One-Euro filter (Casiez, Roussel and Vogel, CHI 2012) on each track's points. Each point is
low-passed with the smoothing factor a = r / (r + 1), r = 2 pi f_c dt, of a cutoff that rises with its speed,
f_c = min_cutoff + beta |v|, where v is the point's velocity low-passed at a fixed ``d_cutoff``: a still point is
smoothed hard (jitter removed), a moving one lightly (little lag). |v| is the speed of the 2-D point (not of x and y
apart) in person heights per second (the track's box height), so ``beta`` does not depend on the video's resolution
or on how far away the person is.

Dense maps: a running blend, out = w new + (1 - w) previous output, of each output map (logits, normals, ...)
before it is written (normals are made unit again by their writer).
"""

from __future__ import annotations

import argparse
import math
from dataclasses import dataclass

import numpy as np

from datamodules.errors import BadInput

# Chosen on rendered clips (bench/smoothing.py --sweep, docs/predict.md "Smoothing"): among the settings whose error
# on figures moving at 0.5 and 1 heights/s stays within 10% of the unfiltered one, the least jitter on still figures
# (0.35 of the unfiltered; d_cutoff 1 Hz, the paper's, kept 0.48 at that error).
MIN_CUTOFF = 0.5
BETA = 16.0
D_CUTOFF = 0.5


@dataclass(frozen=True)
class SmoothOptions:
    """Temporal smoothing of a video's predictions.

    Args:
        keypoints: Filter each track's keypoints (One-Euro).
        min_cutoff: One-Euro cutoff frequency at rest (Hz): lower removes more jitter of still keypoints.
        beta: How fast the cutoff rises with a keypoint's speed, per person height per second: higher lags less
            behind moving keypoints (and keeps more of their jitter).
        d_cutoff: Cutoff frequency (Hz) of the speed estimate.
        map_weight: Dense maps: weight of the new frame in the running blend (1: not blended; 0.5: the last
            frames weigh 1/2, 1/4, 1/8, ...).
    """

    keypoints: bool = True
    min_cutoff: float = MIN_CUTOFF
    beta: float = BETA
    d_cutoff: float = D_CUTOFF
    map_weight: float = 1.0

    def problems(self) -> list[str]:
        """What is wrong with these options (none: [])."""
        out = [f"{name} must be > 0, got {getattr(self, name)}" for name in ("min_cutoff", "d_cutoff")
               if not getattr(self, name) > 0]
        if not self.beta >= 0:
            out.append(f"beta must be >= 0, got {self.beta}")
        if not 0 < self.map_weight <= 1:
            out.append(f"map_weight must be in (0, 1], got {self.map_weight}")
        return out


def smoothing_factor(dt: float, cutoff) -> np.ndarray:
    """The weight of a new sample in a first-order low-pass of ``cutoff`` Hz after ``dt`` seconds."""
    r = 2 * math.pi * np.asarray(cutoff, dtype=np.float64) * dt
    return r / (r + 1)


class OneEuroFilter:
    """One-Euro filter of an array of points that move together (e.g. one person's (K, 2) keypoints), each point
    filtered on its own; the last axis holds a point's coordinates."""

    def __init__(self, min_cutoff: float = MIN_CUTOFF, beta: float = BETA, d_cutoff: float = D_CUTOFF):
        self.min_cutoff, self.beta, self.d_cutoff = min_cutoff, beta, d_cutoff
        self.t: float | None = None
        self.x = self.dx = None

    def __call__(self, x: np.ndarray, t: float, scale: float = 1.0) -> np.ndarray:
        """The filtered ``x`` at time ``t`` (seconds, increasing); ``scale`` is the unit of speed in ``beta``
        (speeds are divided by it). The first call returns ``x``."""
        x = np.asarray(x, dtype=np.float64)
        if self.t is None or t <= self.t or self.x.shape != x.shape:
            self.t, self.x, self.dx = t, x.copy(), np.zeros_like(x)
            return x.copy()
        dt = t - self.t
        self.dx = self.dx + smoothing_factor(dt, self.d_cutoff) * ((x - self.x) / dt - self.dx)
        speed = np.linalg.norm(self.dx, axis=-1, keepdims=True) / max(scale, 1e-9)
        self.x = self.x + smoothing_factor(dt, self.min_cutoff + self.beta * speed) * (x - self.x)
        self.t = t
        return self.x.copy()


class KeypointSmoother:
    """One ``OneEuroFilter`` per track id; a track unseen for ``max_age`` seconds starts afresh."""

    def __init__(self, options: SmoothOptions, max_age: float = 1.0):
        self.options, self.max_age = options, max_age
        self.filters: dict[int, OneEuroFilter] = {}

    def __call__(self, people: list[dict], t: float) -> None:
        """Replace the ``points`` of each person (with ``track_id`` and ``bbox`` [x, y, w, h]) at time ``t`` by their
        filtered values, in place."""
        self.filters = {k: f for k, f in self.filters.items() if f.t is not None and t - f.t <= self.max_age}
        for person in people:
            o = self.options
            track = self.filters.setdefault(person["track_id"], OneEuroFilter(o.min_cutoff, o.beta, o.d_cutoff))
            person["points"] = track(person["points"], t, scale=float(person["bbox"][3]))


class MapBlend:
    """Running blend of a stream of one model's dense outputs (dicts of tensors of the same shapes)."""

    def __init__(self, weight: float):
        self.weight = weight
        self.previous: dict | None = None

    def __call__(self, maps: dict) -> dict:
        if self.weight < 1 and self.previous is not None and all(
                self.previous[k].shape == v.shape for k, v in maps.items() if k in self.previous):
            maps = {k: self.weight * v + (1 - self.weight) * self.previous[k] if k in self.previous else v
                    for k, v in maps.items()}
        self.previous = maps
        return maps


def add_smooth_arguments(parser: argparse.ArgumentParser) -> None:
    """``--smooth``, ``--smooth_min_cutoff``, ``--smooth_beta`` and ``--smooth_maps`` of ``predict``."""
    parser.add_argument("--smooth", action="store_true",
                        help="video: One-Euro filtering of each track's keypoints (docs/predict.md, 'Smoothing')")
    parser.add_argument("--smooth_min_cutoff", type=float, default=MIN_CUTOFF,
                        help=f"--smooth: cutoff frequency (Hz) at rest; lower removes more jitter (default {MIN_CUTOFF})")
    parser.add_argument("--smooth_beta", type=float, default=BETA,
                        help="--smooth: how fast the cutoff rises with speed, per person height per second; higher "
                             f"lags less in motion (default {BETA})")
    parser.add_argument("--smooth_maps", type=float, default=None, metavar="W",
                        help="video: running blend of the dense maps, W the new frame's weight in (0, 1]")


def smooth_options(args: argparse.Namespace, video: bool, pose: bool) -> SmoothOptions | None:
    """The smoothing the command line asks for (None: none); a problem is a BadInput naming its flag."""
    tuned = args.smooth_min_cutoff != MIN_CUTOFF or args.smooth_beta != BETA
    if not (args.smooth or tuned or args.smooth_maps is not None):
        return None
    if not video:
        raise BadInput("--smooth and --smooth_maps are for videos (a video file, or a folder of frames with --video)")
    if tuned and not args.smooth:
        raise BadInput("--smooth_min_cutoff and --smooth_beta tune --smooth; add --smooth")
    if args.smooth and not pose:
        raise BadInput("--smooth filters keypoints and no --model is a pose model; for dense maps give "
                       "--smooth_maps W")
    options = SmoothOptions(args.smooth, args.smooth_min_cutoff, args.smooth_beta,
                            map_weight=1.0 if args.smooth_maps is None else args.smooth_maps)
    flags = {"min_cutoff": "--smooth_min_cutoff", "beta": "--smooth_beta", "map_weight": "--smooth_maps"}
    problems = [f"{flags.get(p.split()[0], p.split()[0])}: {p}" for p in options.problems()]
    if problems:
        raise BadInput("; ".join(problems))
    return options if options.keypoints or options.map_weight < 1 else None
