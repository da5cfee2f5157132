"""``results.png``: a run's curves drawn from its ``metrics.csv``, for users without a dashboard."""

from __future__ import annotations

import csv
import io
import math
import re
from pathlib import Path

from datamodules.boundary.files import read_text
from datamodules.boundary.limits import MAX_FILE_BYTES
from datamodules.boundary.writes import replacing

CELL = (4.5, 3.2)  # inches per panel
# Fixed margins, inches: matplotlib's tight_layout costs as much as the drawing (about 1 s a page).
LEFT, RIGHT, BOTTOM, TOP, SUPTITLE = 0.75, 0.2, 0.5, 0.4, 0.4


def read_metrics(path: Path) -> dict[str, list[tuple[float, float]]]:
    """Column -> (step, value) points of a Lightning ``metrics.csv`` (rows log different columns)."""
    series: dict[str, dict[float, float]] = {}
    for row in csv.DictReader(io.StringIO(read_text(path, MAX_FILE_BYTES, "metrics"))):
        step = row.get("step")
        if not step:
            continue
        for key, value in row.items():
            if key in ("step", "epoch") or value in ("", None):
                continue
            # A resumed run logs again the steps after its last checkpoint: the later value wins.
            series.setdefault(key, {})[float(step)] = float(value)
    return {key: sorted(points.items()) for key, points in series.items()}


def metric_family(name: str) -> str:
    """Metrics drawn together: ``AP``/``AP50``/``APM`` -> ``AP``; ``angle_mean``/``angle_rmse`` -> ``angle``;
    ``l1`` stays ``l1`` (a one-letter stem is no family)."""
    if "_" in name:
        return name.split("_")[0]
    stem = re.sub(r"(\d+|[ML])$", "", name)
    return stem if len(stem) > 1 else name


def _panels(series: dict) -> list[tuple[str, list[str]]]:
    """(title, columns) per subplot: train losses, val losses, each val metric family, lr, speed, memory."""
    train = sorted(k for k in series if k.startswith("train/") and k != "train/samples_per_s")
    terms = {k.split("/", 1)[1] for k in train}
    val = sorted(k for k in series if k.startswith("val/"))
    val_losses = [k for k in val if k.split("/", 1)[1] in terms]
    families: dict[str, list[str]] = {}
    for key in val:
        if key not in val_losses:
            families.setdefault(metric_family(key.split("/", 1)[1]), []).append(key)
    lrs = sorted(k for k in series if k.startswith("lr-"))
    panels = [("train losses", train)] if train else []
    panels += [("val losses", val_losses)] if val_losses else []
    panels += [(f"val {family}", keys) for family, keys in families.items()]
    if lrs:  # the head's group has the largest learning rate; layer-wise decay gives the others
        head = max(lrs, key=lambda k: max(v for _, v in series[k]))
        panels.append(("learning rate (head group)", [head]))
    panels += [(key, [key]) for key in ("train/samples_per_s", "system/peak_memory_gib") if key in series]
    return panels


def write_results_png(run_dir: str | Path, monitor: str | None = None) -> Path | None:
    """Draw ``<run_dir>/results.png`` from ``<run_dir>/metrics.csv``; None when there is nothing to draw."""
    run_dir = Path(run_dir)
    metrics = run_dir / "metrics.csv"
    if not metrics.exists():
        return None
    series = read_metrics(metrics)
    panels = _panels(series)
    if not panels:
        return None
    from matplotlib.figure import Figure  # not pyplot: no global figure state, no backend switch

    cols = min(3, len(panels))
    rows = math.ceil(len(panels) / cols)
    width, height = CELL[0] * cols, CELL[1] * rows + SUPTITLE
    fig = Figure(figsize=(width, height))
    axes_w, axes_h = CELL[0] - LEFT - RIGHT, CELL[1] - BOTTOM - TOP
    fig.subplots_adjust(left=LEFT / width, right=1 - RIGHT / width, bottom=BOTTOM / height,
                        top=1 - (SUPTITLE + TOP) / height, wspace=(LEFT + RIGHT) / axes_w,
                        hspace=(BOTTOM + TOP) / axes_h)
    axes = fig.subplots(rows, cols, squeeze=False)
    for ax, (title, keys) in zip(axes.flat, panels):
        for key in keys:
            steps, values = zip(*series[key])
            style = "o-" if len(steps) < 30 else "-"
            ax.plot(steps, values, style, markersize=3, label=key.split("/", 1)[-1])
        ax.set_title(title + (f" ({monitor.split('/', 1)[1]}: checkpoint metric)" if monitor in keys else ""),
                     fontsize=10)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if len(keys) > 1:
            ax.legend(fontsize=7)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(f"{run_dir.parent.name}/{run_dir.name}", y=1 - 0.1 / height, va="top")
    with replacing(run_dir, "results.png") as temporary:
        fig.savefig(temporary, dpi=90)
    return run_dir / "results.png"
