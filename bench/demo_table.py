"""The demos as the README's table reports them: each ``<task>_demo.yaml`` run as a user runs it, its val metrics
and wall time, one CSV row a run.

    python bench/demo_table.py                                  # the six demos, seed 0, as shipped
    python bench/demo_table.py --tasks pose seg --seeds 0 1 2   # the spread over seeds
    python bench/demo_table.py --new_head                       # new heads (lr 2e-3), as the table's "new head"
    python bench/demo_table.py --backbone runs/candidate        # a candidate backbone (with its heads)

Each run is ``python train.py --config <task>_demo.yaml`` in its own process (the demos validate first: each row has
the start and the end), under
``--work/<task>-seed<s>[-new]``; the demo data is rendered first if missing, outside the timed runs; other
arguments go to every run. Rows go to ``--csv`` (default ``bench/out/demo_table.csv``), and a markdown table of
the headline metrics is printed. Time it on an idle machine: the wall time is the README's figure.
"""

from __future__ import annotations

import argparse
import csv
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from sapiens2_ft.tasks.registry import TASKS  # noqa: E402  (the path above first)

DEMOS = ("pose", "seg", "normal", "pointmap", "matting", "albedo")
NEW_HEAD = ["--model.pretraining_head", "false", "--model.optim.lr", "2.0e-3", "--model.freeze", "none"]
# Shown beside each demo's monitored metric (the registry's), as the README's table does.
EXTRA = {"pose": ("AP50", "AR", "AP_body", "AP_feet"), "seg": ("aAcc",), "normal": (),
         "pointmap": ("l2_predicted_focal",), "matting": ("mse",), "albedo": ("ssim", "mae")}


def run_demo(task: str, seed: int, run_dir: Path, extra: list[str]) -> dict:
    """One demo in a fresh process; its summary's metrics, the process's wall time and the fit's."""
    command = [sys.executable, str(ROOT / "train.py"), "--config", f"{task}_demo.yaml", "--run_dir", str(run_dir),
               "--seed_everything", str(seed), "--trainer.enable_progress_bar", "false", *extra]
    started = time.perf_counter()
    subprocess.run(command, cwd=ROOT, check=True)
    wall = time.perf_counter() - started
    summary = json.loads((run_dir / "summary.json").read_text())
    return {"metrics": summary["metrics"], "start": summary.get("start_metrics", {}), "wall_s": wall,
            "fit_wall_time_s": summary.get("fit_wall_time_s")}


def prepare_data(task: str, work: Path) -> None:
    """The demo's data rendered by a zero-step run (not timed), so that every timed run trains on data on disk."""
    run_demo(task, 0, work / f"{task}-render", ["--trainer.max_steps", "0", "--export", "false"])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", nargs="+", default=list(DEMOS), choices=DEMOS)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0])
    parser.add_argument("--new_head", action="store_true", help="a new head at lr 2e-3 instead of the pretrained")
    parser.add_argument("--backbone", default=None, help="model.pretrained (default: the recipes' shipped backbone)")
    parser.add_argument("--work", type=Path, default=ROOT / "runs/demo_table")
    parser.add_argument("--csv", type=Path, default=ROOT / "bench/out/demo_table.csv")
    args, train_args = parser.parse_known_args(argv)  # the rest goes to train.py (--trainer.max_steps 20)
    extra = train_args + (NEW_HEAD if args.new_head else []) \
        + (["--model.pretrained", args.backbone] if args.backbone else [])
    head = "new" if args.new_head else "pretrained"
    rows = []
    for task in args.tasks:
        prepare_data(task, args.work)
        monitor = TASKS[task].training.monitor[0].removeprefix("val/")  # the summary drops the prefix
        for seed in args.seeds:
            name = f"{task}-seed{seed}" + ("-new" if args.new_head else "")
            result = run_demo(task, seed, args.work / name, extra)
            metrics, start = result["metrics"], result["start"]
            shown = {k: metrics[k] for k in (monitor, *EXTRA[task]) if k in metrics}
            rows.append({"task": task, "seed": seed, "head": head, "backbone": args.backbone or "shipped",
                         "wall_s": round(result["wall_s"], 1), "fit_wall_time_s": result["fit_wall_time_s"],
                         "metrics": json.dumps({k: round(float(v), 4) for k, v in shown.items()}),
                         "start_metrics": json.dumps({k: round(float(start[k]), 4) for k in shown if k in start})})
            print(f"{name}: {shown} (start: {rows[-1]['start_metrics']}), {result['wall_s']:.0f} s", flush=True)
    args.csv.parent.mkdir(parents=True, exist_ok=True)
    new_file = not args.csv.exists()
    with args.csv.open("a", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        if new_file:
            writer.writeheader()
        writer.writerows(rows)
    print("\n| demo | seed | head | wall | val: start -> end (validate_first) |\n|---|---|---|---|---|")
    for r in rows:
        minutes, seconds = divmod(round(r["wall_s"]), 60)
        start = json.loads(r["start_metrics"])
        values = ", ".join(f"{k} {start[k]:.4g} -> {v:.4g}" if k in start else f"{k} {v:.4g}"
                           for k, v in json.loads(r["metrics"]).items())
        print(f"| {r['task']} | {r['seed']} | {r['head']} | {minutes} min {seconds:02d} s | {values} |")
    print(f"rows appended to {args.csv}")


if __name__ == "__main__":
    main()
