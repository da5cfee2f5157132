"""Pretrain the tiny backbone the pose demo starts from, and save it as a pretrain-only checkpoint.

Sapiens2 users fine-tune a pretrained backbone; a from-scratch tiny model learns too little in
the demo's 3 CPU minutes to show that workflow. This script stands in for the pretraining: it
trains the ``tiny`` preset on synthetic figures of a *different* seed than the demo data (with the
soft-target heatmap cross-entropy, which escapes the all-zero solution from random init), then
keeps only the backbone (``Sapiens2Model``), so the demo builds a new head exactly as a user
starting from ``facebook/sapiens2-pretrain-*`` does.

    python tools/pretrain_demo_backbone.py --out assets/sapiens2-tiny-synthetic --minutes 25
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from transformers import Sapiens2Model

from sapiens2_ft.cli import main as train


def save_backbone(checkpoint: str, out: Path, summary: dict) -> None:
    """Keep the ``model.model.*`` (backbone) weights of a PoseModule checkpoint as a Sapiens2Model."""
    state = torch.load(checkpoint, map_location="cpu", weights_only=True)["state_dict"]
    from sapiens2_ft.models.factory import build_model

    pose, _ = build_model("pose", ["kp"], (256, 192), size="tiny")
    backbone = Sapiens2Model(pose.config)
    prefix = "model.model."
    backbone.load_state_dict({k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)})
    backbone.config.architectures = ["Sapiens2Model"]
    backbone.config.head_config = None
    backbone.save_pretrained(out)
    (out / "PRETRAINING.json").write_text(json.dumps({
        "recipe": "tools/pretrain_demo_backbone.py", "checkpoint": checkpoint,
        "val_metrics_with_pretraining_head": summary["metrics"], "steps": summary["global_step"],
    }, indent=2))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("assets/sapiens2-tiny-synthetic"))
    parser.add_argument("--data_root", default="data/synthetic-pretrain")
    parser.add_argument("--num_images", type=int, default=1200)
    parser.add_argument("--seed", type=int, default=1000, help="synthetic seed (the demo data uses 0)")
    parser.add_argument("--minutes", type=float, default=25.0)
    parser.add_argument("--steps", type=int, default=2600)
    args = parser.parse_args()
    minutes = int(args.minutes)
    summary = train([
        "--config", "pose_demo.yaml", "--run_dir", "runs/pretrain_demo_backbone",
        "--data.root", args.data_root, "--data.synthetic.num_images", str(args.num_images),
        "--data.synthetic.seed", str(args.seed), "--trainer.max_steps", str(args.steps),
        "--trainer.max_time", f"00:{minutes // 60:02d}:{minutes % 60:02d}:00",
        "--trainer.val_check_interval", "500", "--model.optim.lr", "2e-3", "--model.optim.warmup_steps", "100",
    ])
    save_backbone(summary["last_checkpoint"], args.out, summary)
    print(f"backbone saved to {args.out}")


if __name__ == "__main__":
    main()
