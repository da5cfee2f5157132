"""Pretrain the demo backbone on every task at once, then keep only the backbone as a pretrain-only checkpoint.

Sapiens2 users fine-tune a pretrained backbone; a from-scratch model learns too little in the demos' 3 CPU
minutes to show that workflow. This script stands in for Sapiens2's pretraining in miniature: it runs
``configs/pretrain_demo_backbone.yaml`` (one ``mini`` backbone, a head per task, synthetic renders of another
seed than the demo data) through ``train.py``, then saves the shared backbone (``Sapiens2Model``), so each
demo builds a new head exactly as a user starting from ``facebook/sapiens2-pretrain-*`` does.

    python tools/pretrain_demo_backbone.py                        # fresh run, or continue --run_dir's
    python tools/pretrain_demo_backbone.py --save_only RUN_DIR    # keep the backbone of a run's last.ckpt

The run goes to ``--run_dir`` (default ``runs/pretrain_demo_backbone/main``), continued from its checkpoint when it
has one (``--resume auto --run_dir``). Extra arguments go to ``train.py`` (``--trainer.max_steps 2000``,
``--trainer.max_time 00:06:00:00``).
``--precision auto`` (the default) trains under bf16 autocast on a CPU with native bf16 (``avx512_bf16`` or AMX:
the step runs about 1.6x faster, ``bench/cpu_mfu.py``) and in fp32 elsewhere; a value is passed to
``trainer.precision`` as given.
"""

from __future__ import annotations

import argparse
import csv
import json
import platform
import time
from pathlib import Path

import torch
import yaml
from safetensors.torch import save_file
from transformers import Sapiens2Config, Sapiens2Model

from sapiens2_ft.models.pretraining_heads import HEADS_FILE, labels_key
from sapiens2_ft.tasks.multitask.module import MultiTaskModule

# The shared backbone's keys in a multi-task checkpoint (before 2026-12-03: without the leading "model.").
PREFIXES = ("model.backbone.backbone.", "backbone.backbone.")
HEADS_PREFIX = "model.tasks."


def cpu_name() -> str:
    """The CPU's model name (``/proc/cpuinfo``) and its native bf16 flags, if any: the runs' speeds differ."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or platform.machine()
    name = next((line.split(":", 1)[1].strip() for line in info.splitlines() if line.startswith("model name")), "")
    flags = set(info.split())
    return " ".join([name, *[f for f in ("amx_bf16", "avx512_bf16") if f in flags]]) or platform.machine()


def compute_record(data: dict, run_dir: Path, summary: dict) -> dict:
    """What the backbone of ``data`` (a run's checkpoint) cost: the runs of the backbone it started from (that
    folder's ``PRETRAINING.json``), then this run, with the totals over all of them."""
    hparams = data.get("hyper_parameters") or {}
    config_file = run_dir / "config.yaml"
    config = yaml.safe_load(config_file.read_text()) if config_file.is_file() else {}
    start = hparams.get("pretrained")
    before = []
    if start and (Path(start) / "PRETRAINING.json").is_file():
        before = json.loads((Path(start) / "PRETRAINING.json").read_text()).get("runs", [])
    this = {"run": f"{run_dir.parent.name}/{run_dir.name}", "started_from": start or "random init",
            "steps": int(data.get("global_step", 0)), "max_steps": (config.get("trainer") or {}).get("max_steps"),
            "precision": (config.get("trainer") or {}).get("precision"),
            "lr": (hparams.get("optim") or {}).get("lr"),
            "fit_wall_time_s": summary.get("fit_wall_time_s"),  # this process's fit: since the resume, if resumed
            "cpu": cpu_name(), "saved": time.strftime("%Y-%m-%d")}
    runs = [r for r in before if r.get("run") != this["run"]] + [this]  # a run saved twice counts once
    batch = (config.get("data") or {}).get("batch_size", 16)
    return {"total_steps": sum(r["steps"] for r in runs), "total_samples": sum(r["steps"] for r in runs) * batch,
            "total_fit_wall_time_s": round(sum(r.get("fit_wall_time_s") or 0 for r in runs), 1), "runs": runs}


def save_backbone(checkpoint: Path, out: Path, summary: dict) -> None:
    """Keep the shared backbone (``model.backbone.backbone.*``) of a multi-task checkpoint as a ``Sapiens2Model``,
    and its heads (``model.tasks.*``) beside it in ``HEADS_FILE``, where continued pretraining loads them;
    ``PRETRAINING.json`` records its metrics and the compute of every run behind it (``compute_record``)."""
    data = torch.load(checkpoint, map_location="cpu", weights_only=True)
    record = compute_record(data, checkpoint.parent.parent, summary)  # before ``out`` (maybe the start) changes
    config = Sapiens2Config(**{k: v for k, v in data["sapiens2_ft"]["model_config"].items()
                               if k not in ("head_config", "id2label", "label2id", "architectures",
                                           "heatmap_output")})  # the heads' settings stay with the heads
    backbone = Sapiens2Model(config)
    prefix = next(p for p in PREFIXES if any(k.startswith(p) for k in data["state_dict"]))
    state = {k[len(prefix):]: v for k, v in data["state_dict"].items() if k.startswith(prefix)}
    backbone.load_state_dict(state)
    backbone.config.architectures = ["Sapiens2Model"]
    backbone.save_pretrained(out)
    # In bf16 (5 MB for the mini model's five heads, as much as the backbone in fp32): they only start a warm restart.
    heads = {k[len(HEADS_PREFIX):]: (v.to(torch.bfloat16) if v.is_floating_point() else v).contiguous()
             for k, v in data["state_dict"].items() if k.startswith(HEADS_PREFIX)}
    if heads:  # where continued pretraining takes them from (multi-task checkpoints since 2026-12-03)
        rows = MultiTaskModule.head_labels(data.get("hyper_parameters") or {})  # fine-tuning maps rows by name
        save_file(heads, out / HEADS_FILE, metadata={labels_key(task): json.dumps(names) for task, names in rows.items()})
    (out / "PRETRAINING.json").write_text(json.dumps({
        "recipe": "configs/pretrain_demo_backbone.yaml (tools/pretrain_demo_backbone.py)",
        "steps": int(data.get("global_step", 0)), **summary, **record}, indent=2))


def last_validation(run_dir: Path) -> dict | None:
    """The last validation's ``val/*`` metrics in the run's ``metrics.csv`` (a run stopped before its summary)."""
    path = run_dir / "metrics.csv"
    if not path.exists():
        return None
    rows = [r for r in csv.DictReader(path.open()) if r.get("val/loss")]
    if not rows:
        return None
    return {"step": int(rows[-1]["step"]), **{k.removeprefix("val/"): float(v) for k, v in rows[-1].items()
                                              if k.startswith("val/") and v}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, default=Path("assets/sapiens2-mini-synthetic"))
    parser.add_argument("--save_only", type=Path, default=None, help="a run directory: only save its backbone")
    parser.add_argument("--run_dir", default="runs/pretrain_demo_backbone/main",
                        help="the run: continued from its last checkpoint when it has one, else started there")
    parser.add_argument("--precision", default="auto",
                        help="trainer.precision; auto: bf16-mixed on a CPU with native bf16, else 32-true")
    args, train_args = parser.parse_known_args()
    if args.save_only is not None:
        summary_file = args.save_only / "summary.json"
        summary = json.loads(summary_file.read_text()) if summary_file.exists() else {}
        save_backbone(args.save_only / "checkpoints" / "last.ckpt", args.out,
                      {"val_metrics": summary.get("metrics") or last_validation(args.save_only),
                       "fit_wall_time_s": summary.get("fit_wall_time_s")})
    else:
        from sapiens2_ft.training.cli import main as train
        from sapiens2_ft.training.cpu_precision import cpu_precision

        precision = cpu_precision(args.precision)
        print(f"trainer.precision: {precision}")
        summary = train(["--config", "pretrain_demo_backbone.yaml", "--resume", "auto", "--run_dir", args.run_dir,
                         "--trainer.precision", precision, *train_args])
        run_dir = Path(summary["run_dir"])
        save_backbone(run_dir / "checkpoints" / "last.ckpt", args.out,
                      {"val_metrics": summary["metrics"], "fit_wall_time_s": summary.get("fit_wall_time_s")})
    print(f"backbone saved to {args.out}")


if __name__ == "__main__":
    main()
