"""The demo backbone's learning curve: its own heads' validation metrics against its pretraining steps, per run.

The numbers live in ``docs/data/demo_backbone_curve.csv`` (one row per validation of a pretraining run: the run,
its recipe, the backbone's total pretraining steps, the run's own steps, its fit wall time when known, and the
heads' metrics on the 240 validation images). This draws them into ``docs/images/demo_backbone_curve.png``.

    python tools/pretraining_curve.py                               # redraw the plot
    python tools/pretraining_curve.py --append RUN_DIR --run 4 --recipe "..." --start 5100
        # add the validations of a run's metrics.csv (total steps = --start + the run's step), then redraw
"""

from __future__ import annotations

import argparse
import csv
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CSV = ROOT / "docs" / "data" / "demo_backbone_curve.csv"
PNG = ROOT / "docs" / "images" / "demo_backbone_curve.png"
COLUMNS = ["run", "recipe", "total_steps", "run_steps", "wall_s", "pose_AP", "pose_AP50", "pose_AR", "seg_mIoU",
           "normal_angle_mean", "pointmap_l2", "matting_mse"]
PANELS = [("pose_AP", "pose OKS AP (higher is better)"), ("seg_mIoU", "seg mIoU (higher)"),
          ("normal_angle_mean", "normal mean angle, deg (lower)"), ("pointmap_l2", "pointmap L2, m (lower)"),
          ("matting_mse", "matting MSE (lower)"), ("pose_AR", "pose OKS AR (higher)")]


def read_rows(path: Path = CSV) -> list[dict]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def validations(run_dir: Path) -> list[dict]:
    """``val/*`` rows of a run's ``metrics.csv`` as (step, metrics) dicts in this file's columns. Lightning logs a
    validation within the epoch at the step before; the one after the last step (a budget that is not a multiple
    of ``val_check_interval``) at the step count itself, which the run's ``summary.json`` caps."""
    summary = run_dir / "summary.json"
    last = json.loads(summary.read_text()).get("global_step") if summary.exists() else None
    rows = []
    for row in csv.DictReader((run_dir / "metrics.csv").open()):
        if row.get("val/loss"):
            steps = int(row["step"]) + 1
            rows.append({"run_steps": min(steps, last) if last else steps,
                         **{c: row.get(f"val/{c}", "") for c in COLUMNS[5:]}})
    return rows


def append(run_dir: Path, run: str, recipe: str, start: int, wall_s: float | None, path: Path = CSV) -> None:
    """Add the run's validations to the CSV at ``path`` (its wall time on the last row)."""
    rows = read_rows(path)
    new = validations(run_dir)
    for i, row in enumerate(new):
        row.update(run=run, recipe=recipe, total_steps=start + row["run_steps"],
                   wall_s=f"{wall_s:.0f}" if wall_s and i == len(new) - 1 else "")
        rows.append(row)
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, COLUMNS)
        writer.writeheader()
        writer.writerows({c: row.get(c, "") for c in COLUMNS} for row in rows)


def draw(rows: list[dict], out: Path = PNG) -> Path:
    """One panel per metric, one line per run; returns ``out``."""
    from matplotlib.figure import Figure  # not pyplot: no global state

    runs = sorted({r["run"] for r in rows}, key=int)
    legend_in = 0.35 + 0.16 * len(runs)  # one legend line per run, below the panels: the recipes are long
    figure = Figure(figsize=(13, 6 + legend_in))
    axes = figure.subplots(2, 3)
    for ax, (key, title) in zip(axes.flat, PANELS):
        for i, run in enumerate(runs):  # one colour per run in every panel, drawn or not
            points = [(int(r["total_steps"]), float(r[key])) for r in rows if r["run"] == run and r[key]]
            if points:
                recipe = next(r["recipe"] for r in rows if r["run"] == run)
                ax.plot(*zip(*points), "o-", color=f"C{i}", markersize=4, label=f"run {run}: {recipe}")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("backbone pretraining steps (batch 16)")
        ax.grid(alpha=0.3)
    handles, labels = axes.flat[0].get_legend_handles_labels()
    figure.legend(handles, labels, loc="lower center", ncol=1, fontsize=8, frameon=False)
    figure.suptitle("Demo backbone: its own heads on the 240 validation images, per pretraining run")
    figure.subplots_adjust(left=0.06, right=0.98, top=1 - 0.5 / (6 + legend_in),
                           bottom=(legend_in + 0.55) / (6 + legend_in), wspace=0.25, hspace=0.4)
    out.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(out, dpi=80)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--append", type=Path, default=None, help="a pretraining run directory")
    parser.add_argument("--run", default=None, help="its number in the CSV")
    parser.add_argument("--recipe", default="", help="a few words on its recipe")
    parser.add_argument("--start", type=int, default=0, help="the backbone's pretraining steps before the run")
    parser.add_argument("--wall_s", type=float, default=None, help="the run's fit wall time (on its last row)")
    args = parser.parse_args()
    if args.append is not None:
        if args.run is None:
            parser.error("--append needs --run")
        append(args.append, args.run, args.recipe, args.start, args.wall_s)
    print(f"wrote {draw(read_rows())}")


if __name__ == "__main__":
    main()
