"""Lengths of the vectors of a (B, 3, H, W) map on the CPU: ``dense_maps.vector_length`` / ``unit_vectors`` (root
of the sum of squares) against ``torch.linalg.vector_norm`` / ``F.normalize``, forward and backward.

The normal loss and the pointmap loss and metric normalise such maps on every step. The two sides are timed
in alternation (``--rounds`` pairs), so load changes on the machine hit both; reported: median times and the
median of the per-pair ratios.

Run: ``python bench/vector_length.py [--shape 8 3 256 192] [--rounds 20]`` (a few seconds).
"""

from __future__ import annotations

import argparse

import torch
import torch.nn.functional as F
from timing import paired

from sapiens2_ft.tasks.dense_maps import unit_vectors, vector_length


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shape", type=int, nargs=4, default=[8, 3, 256, 192], help="the normal demo's batch")
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args()
    x = torch.randn(*args.shape, requires_grad=True)
    cases = {
        "length (forward)": (lambda v: vector_length(v.detach()),
                             lambda v: torch.linalg.vector_norm(v.detach(), dim=1, keepdim=True)),
        "unit vectors (forward + backward)": (lambda v: unit_vectors(v, eps=1e-6).sum().backward(),
                                              lambda v: F.normalize(v, dim=1, eps=1e-6).sum().backward()),
    }
    print(f"shape {tuple(args.shape)}, {torch.get_num_threads()} threads, torch {torch.__version__}")
    for name, (ours, torchs) in cases.items():
        a, b, ratio = paired(lambda: ours(x), lambda: torchs(x), args.rounds)
        print(f"{name:36s} sum of squares {a * 1e3:7.2f} ms   torch {b * 1e3:7.2f} ms   torch / ours x{ratio:.1f}")


if __name__ == "__main__":
    main()
