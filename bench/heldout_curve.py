"""The demo backbone's own heads on a held-out set of 1200 synthetic images: one row per backbone, into a CSV.

The pretraining validates on 240 images (``data/synthetic-pretrain``'s val split), too few to tell two
backbones apart by a few AP points. This scores backbones with their saved heads
(``pretraining_heads.safetensors``) on 1200 images of another seed (``data/synthetic-heldout``, rendered on the
first run, ~1 min), exactly as the pretraining validates: ``train.py --config pretrain_demo_backbone.yaml
--trainer.max_steps 0 --model.pretrained DIR``. About 3 min a backbone on 2 cores.

    python bench/heldout_curve.py assets/sapiens2-mini-synthetic runs/candidate
    python bench/heldout_curve.py git:15a7748 git:d619da5      # the backbone shipped at a commit

Each row: the backbone's ``total_steps`` (its ``PRETRAINING.json``), the source and the metrics. Rows are
appended to ``--csv`` (default ``docs/data/demo_backbone_heldout.csv``); a source already there is replaced.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ASSET = "assets/sapiens2-mini-synthetic"
FILES = ("config.json", "model.safetensors", "pretraining_heads.safetensors", "PRETRAINING.json")
# Seed 7 is neither the pretraining's (1000) nor the demos' (0); 1250 images, the last 1200 of which are val.
DATA = ["--data.root", "data/synthetic-heldout", "--data.synthetic.num_images", "1250",
        "--data.synthetic.seed", "7", "--data.synthetic.val_fraction", "0.96"]
METRICS = ("pose_AP", "pose_AP50", "pose_AR", "seg_mIoU", "normal_angle_mean", "pointmap_l2", "matting_mse")


def checkout(source: str, into: Path) -> Path:
    """A backbone folder for ``source``: a directory as is, ``git:REV`` the shipped backbone at that commit."""
    if not source.startswith("git:"):
        path = Path(source)
        if not (path / "pretraining_heads.safetensors").is_file():
            raise SystemExit(f"{source}: not a backbone folder with its heads (pretraining_heads.safetensors)")
        return path
    rev = source[4:]
    into.mkdir(parents=True)
    for name in FILES:
        blob = subprocess.run(["git", "-C", str(ROOT), "show", f"{rev}:{ASSET}/{name}"], capture_output=True)
        if blob.returncode:
            raise SystemExit(f"{source}: {blob.stderr.decode().strip()}")
        (into / name).write_bytes(blob.stdout)
    return into


def evaluate(backbone: Path, run_dir: Path) -> dict:
    """The own heads' val metrics of ``backbone`` on the held-out split."""
    command = [sys.executable, str(ROOT / "train.py"), "--config", "configs/pretrain_demo_backbone.yaml",
               "--model.pretrained", str(backbone), "--trainer.max_steps", "0", "--run_dir", str(run_dir),
               "--model.scale.compile", "false", *DATA]  # eager, as every row before the recipe compiled
    subprocess.run(command, cwd=ROOT, check=True)
    rows = list(csv.DictReader((run_dir / "metrics.csv").open()))
    last = {k: v for row in rows for k, v in row.items() if v not in ("", None)}
    return {name: float(last[f"val/{name}"]) for name in METRICS}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("sources", nargs="+", help="backbone folders (with their heads) or git:REV")
    parser.add_argument("--csv", type=Path, default=ROOT / "docs/data/demo_backbone_heldout.csv")
    parser.add_argument("--work", type=Path, default=ROOT / "runs/heldout_curve")
    args = parser.parse_args(argv)
    fields = ["total_steps", "source", *METRICS]
    rows = list(csv.DictReader(args.csv.open())) if args.csv.is_file() else []
    with tempfile.TemporaryDirectory() as tmp:
        for i, source in enumerate(args.sources):
            backbone = checkout(source, Path(tmp) / str(i))
            steps = json.loads((backbone / "PRETRAINING.json").read_text()).get("total_steps")
            name = source.replace(":", "-").replace("/", "_")
            metrics = evaluate(backbone, args.work / name)
            print(f"{source} ({steps} steps): " + "  ".join(f"{k}={v:.4f}" for k, v in metrics.items()))
            rows = [r for r in rows if r["source"] != source]
            rows.append({"total_steps": steps, "source": source, **{k: f"{v:.4f}" for k, v in metrics.items()}})
    rows.sort(key=lambda r: int(r["total_steps"] or 0))
    args.csv.parent.mkdir(parents=True, exist_ok=True)
    with args.csv.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    print(f"written to {args.csv}")


if __name__ == "__main__":
    main()
