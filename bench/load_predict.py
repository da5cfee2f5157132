"""What ``sapiens2_ft.load(export).predict(images)`` costs in a fresh process: the wall time of the imports, the load
and one prediction, and which of the training stack's packages (Lightning, wandb, pycocotools, torchmetrics) it
imported.

Tiny randomly initialised models saved with ``save_pretrained`` stand in for exports (a 308-keypoint pose model, as
a released one, and a 29-class seg model), so nothing is downloaded; one 256x192 image, pose on the whole image.
Each model runs ``--rounds`` times in a new interpreter; reported: the median of each phase (seconds) and the
packages loaded. ``--compare DIR`` runs another checkout of this project (e.g. an older commit's worktree) in
turn with this one, round by round, so that the machine's load hits both alike. ``python -X importtime`` gives
the import tree itself.

Run: ``python bench/load_predict.py [--rounds 5] [--out /tmp/load_predict] [--compare ../older-checkout]`` (about
30 s a checkout on 2 CPU cores).
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
TRAINING_STACK = ("lightning", "wandb", "pycocotools", "torchmetrics")

CHILD = """
import json, sys, time
t0 = time.perf_counter()
import numpy as np
import sapiens2_ft
from sapiens2_ft.api import load
t1 = time.perf_counter()
predictor = load(sys.argv[1], device="cpu")
t2 = time.perf_counter()
image = np.random.default_rng(0).integers(0, 255, (256, 192, 3), dtype=np.uint8)
extra = {"boxes": "whole_image"} if sys.argv[2] == "pose" else {}
predictor.predict([image], **extra)
t3 = time.perf_counter()
stack = sorted({m.split(".")[0] for m in sys.modules} & set(sys.argv[3].split(",")))
print(json.dumps({"import": t1 - t0, "load": t2 - t1, "predict": t3 - t2, "total": t3 - t0, "stack": stack}))
"""


def tiny_models(out: Path) -> dict[str, Path]:
    """A 308-keypoint pose model and a 29-class seg model, saved once under ``out``."""
    from transformers import (Sapiens2Config, Sapiens2ForPoseEstimation, Sapiens2ForSemanticSegmentation,
                              Sapiens2HeadConfig)

    from sapiens2_ft.models.presets import BACKBONES

    def config(labels: int, head: dict):
        c = Sapiens2Config(**{**BACKBONES["tiny"], "hidden_size": 64, "intermediate_size": 128,
                              "num_hidden_layers": 2}, image_size=[256, 192], pos_embed_rescale=None,
                           head_config=Sapiens2HeadConfig(**head))
        c.num_labels = labels
        return c

    models = {"pose": (Sapiens2ForPoseEstimation, config(308, dict(upsample_out_channels=[32, 32],
                                                                   conv_out_channels=[32]))),
              "seg": (Sapiens2ForSemanticSegmentation, config(29, dict(upsample_out_channels=[32, 32],
                                                                      conv_out_channels=[32])))}
    paths = {}
    for task, (cls, cfg) in models.items():
        paths[task] = out / task
        if not (paths[task] / "config.json").is_file():
            model = cls(cfg)
            model.config.architectures = [cls.__name__]
            model.save_pretrained(paths[task])
    return paths


def run_once(checkout: Path, model: Path, task: str) -> dict:
    """One fresh interpreter in ``checkout`` (its ``sapiens2_ft`` first on the path): the phases' times."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    done = subprocess.run([sys.executable, "-c", CHILD, str(model), task, ",".join(TRAINING_STACK)], cwd=checkout,
                          env=env, capture_output=True, text=True, check=True)
    return json.loads(done.stdout.splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--out", default="/tmp/load_predict", help="where the tiny models are saved")
    parser.add_argument("--compare", default=None, help="another checkout, run in turn with this one")
    args = parser.parse_args()
    paths = tiny_models(Path(args.out))
    checkouts = [REPO] + ([Path(args.compare).resolve()] if args.compare else [])
    for task, path in paths.items():
        runs: dict[Path, list[dict]] = {c: [] for c in checkouts}
        for _ in range(args.rounds):
            for checkout in checkouts:
                runs[checkout].append(run_once(checkout, path, task))
        for checkout, done in runs.items():
            medians = {k: statistics.median(r[k] for r in done) for k in ("import", "load", "predict", "total")}
            print(f"{task} ({checkout.name}): " + "  ".join(f"{k} {v:.2f} s" for k, v in medians.items())
                  + f"  training stack imported: {done[0]['stack'] or 'none'}")


if __name__ == "__main__":
    main()
