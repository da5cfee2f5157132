"""CPU training steps with glibc's defaults against glibc keeping freed memory in the heap (what tests/conftest.py
sets for the test suite: ``MALLOC_MMAP_THRESHOLD_`` 1 GiB, ``MALLOC_TRIM_THRESHOLD_`` 2 GiB).

By default glibc serves every block above its mmap threshold (dynamic, at most 32 MiB) from fresh pages and
returns them when freed, so each training step page-faults its large activations in again. Each side runs
``--steps`` AdamW steps of the demo seg model (assets/, 256x192, batch 8, one thread) in a process of its own; the
sides alternate ``--rounds`` times. Reported per run: median step time, minor page faults, system CPU time, peak
memory; then the median of the per-round step-time ratios.

Run: ``python bench/malloc_reuse.py [--rounds 3] [--steps 20]`` (about 2 minutes).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REUSE = {"MALLOC_MMAP_THRESHOLD_": str(1 << 30), "MALLOC_TRIM_THRESHOLD_": str((1 << 31) - 1)}

CHILD = """
import json, resource, statistics, sys, time
import torch
import torch.nn.functional as F
from sapiens2_ft.tasks.registry import build_task_model

torch.manual_seed(0)
model, _ = build_task_model("seg", [f"c{i}" for i in range(29)], (256, 192),
                            pretrained="assets/sapiens2-mini-synthetic")
optimizer = torch.optim.AdamW(model.parameters(), 1e-4)
images, labels = torch.randn(8, 3, 256, 192), torch.randint(0, 29, (8, 256, 192))
times = []
for step in range(int(sys.argv[1]) + 1):
    start = time.perf_counter()
    logits = F.interpolate(model(pixel_values=images).logits, size=(256, 192), mode="bilinear")
    F.cross_entropy(logits, labels).backward()
    optimizer.step()
    optimizer.zero_grad()
    if step:  # the first step warms up
        times.append(time.perf_counter() - start)
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"step_s": statistics.median(times), "minor_faults": usage.ru_minflt, "sys_s": usage.ru_stime,
                  "peak_mib": usage.ru_maxrss / 1024}))
"""


def run(steps: int, reuse: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in REUSE}
    env.update(OMP_NUM_THREADS="1", **(REUSE if reuse else {}))
    done = subprocess.run([sys.executable, "-c", CHILD, str(steps)], cwd=REPO, env=env, capture_output=True,
                          text=True, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    ratios = []
    for round_ in range(args.rounds):
        default, reuse = run(args.steps, False), run(args.steps, True)
        ratios.append(reuse["step_s"] / default["step_s"])
        for name, r in (("glibc default", default), ("keep freed memory", reuse)):
            print(f"round {round_}  {name:18s} step {r['step_s']:.3f} s  minor faults {r['minor_faults'] / 1e6:.2f} M  "
                  f"system {r['sys_s']:.1f} s  peak {r['peak_mib']:.0f} MiB")
    print(f"step time, kept / default: median x{statistics.median(ratios):.2f} "
          f"({', '.join(f'x{r:.2f}' for r in ratios)})")


if __name__ == "__main__":
    main()
