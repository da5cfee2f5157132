"""Validation diagnostics: the tables and pictures behind a low metric.

The metrics compute the numbers inside ``compute`` (on the states synced across processes) and return them from
``diagnostics()`` as a :class:`Diagnostics`: pose per-keypoint OKS / PCK, seg per-class IoU and the confusion
matrix, dense error histograms over fixed bins (:class:`Bins`, so that the counts are sum-reduced states). This
module holds their shape and draws the pictures (matplotlib, imported when drawing); the training layer writes
and logs them (``training/callbacks/diagnostics.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np
import torch
from torch import Tensor

Cell = float | int | str | None  # None: undefined (e.g. a class absent from the ground truth)


@dataclass
class Table:
    """Named columns and rows of plain values."""

    columns: list[str]
    rows: list[list[Cell]]


@dataclass
class Diagnostics:
    """What one validation explains of its metrics: tables by name, RGB uint8 pictures by name."""

    tables: dict[str, Table] = field(default_factory=dict)
    images: dict[str, np.ndarray] = field(default_factory=dict)

    def __bool__(self) -> bool:
        return bool(self.tables or self.images)


def plain(value: float) -> float | None:
    """A float for a table cell; NaN (undefined) becomes None."""
    value = float(value)
    return None if np.isnan(value) else value


@dataclass(frozen=True)
class Bins:
    """``count`` equal bins over [0, ``upper``]; bin i holds edges[i] <= v < edges[i + 1] (as ``numpy.histogram``),
    and the last bin also holds everything at or above its lower edge (values above ``upper`` included)."""

    upper: float
    count: int

    def edges(self) -> np.ndarray:
        return np.linspace(0.0, self.upper, self.count + 1)

    def counts(self, values: Tensor) -> Tensor:
        """int64 (count,) counts of ``values`` (any shape; negative values count in the first bin)."""
        inner = torch.as_tensor(self.edges()[1:-1], dtype=torch.float64, device=values.device)
        index = torch.bucketize(values.detach().double().reshape(-1), inner, right=True)
        return torch.bincount(index, minlength=self.count)


# -- tables ------------------------------------------------------------------------------------------------------

def histogram_table(bins: Bins, counts: Tensor | np.ndarray) -> Table:
    """One row per bin: ``low``, ``high``, ``count``, ``fraction`` and ``cumulative`` (fractions of all values)."""
    counts = np.asarray(torch.as_tensor(counts).cpu(), dtype=np.int64)
    edges, total = bins.edges(), max(int(counts.sum()), 1)
    cumulative = np.cumsum(counts)
    rows = [[float(edges[i]), float(edges[i + 1]), int(counts[i]), float(counts[i] / total),
             float(cumulative[i] / total)] for i in range(bins.count)]
    return Table(["low", "high", "count", "fraction", "cumulative"], rows)


# -- pictures ----------------------------------------------------------------------------------------------------

LABEL_CHAR_INCH = 0.06  # width of one tick-label character at font size 7-8


def _figure(width: float, height: float, left: float = 0.8, bottom: float = 0.6, top: float = 0.6,
            right: float = 0.3):
    """A figure of ``width`` x ``height`` inches with fixed margins (inches): matplotlib's automatic layouts
    cost more than the drawing."""
    from matplotlib.figure import Figure

    figure = Figure(figsize=(width, height), dpi=100)
    figure.subplots_adjust(left=left / width, right=1 - right / width, bottom=bottom / height, top=1 - top / height)
    return figure


def _rgb(figure) -> np.ndarray:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].copy()


def histogram_image(bins: Bins, counts: Tensor | np.ndarray, xlabel: str, title: str, log_y: bool = False) -> np.ndarray:
    """Bars of the fraction of values per bin (log scale when ``log_y``)."""
    counts = np.asarray(torch.as_tensor(counts).cpu(), dtype=np.float64)
    edges = bins.edges()
    fig = _figure(8, 4)
    ax = fig.add_subplot()
    fractions = counts / max(counts.sum(), 1.0)
    if log_y and counts.sum() > 0:
        ax.set_yscale("log")
        ax.set_ylim(0.5 * fractions[fractions > 0].min(), 1.5)
    # One filled step patch (fast for hundreds of bins); in log scale it starts just below the smallest bar.
    ax.stairs(fractions, edges, fill=True, color="#3b75af", baseline=ax.get_ylim()[0] if log_y else 0)
    ax.set_xlim(0, bins.upper)
    ax.set(xlabel=xlabel, ylabel="fraction of pixels", title=title)
    ax.grid(alpha=0.3)
    return _rgb(fig)


def keypoint_bar_chart(names: Sequence[str], oks: np.ndarray, pck: np.ndarray, title: str,
                       max_keypoints: int = 40) -> np.ndarray:
    """Horizontal bars of the mean OKS term and PCK per keypoint (keypoints without visible ground truth left out);
    over ``max_keypoints`` keypoints, the ``max_keypoints`` with the lowest OKS term."""
    shown = [i for i in range(len(names)) if not np.isnan(oks[i])]
    if len(shown) > max_keypoints:
        shown = sorted(shown, key=lambda i: oks[i])[:max_keypoints]
        title = f"{title} (the {max_keypoints} lowest of {len(names)})"
    longest = max((len(str(names[i])) for i in shown), default=4)
    fig = _figure(8, 1.4 + 0.28 * max(len(shown), 1), left=0.3 + LABEL_CHAR_INCH * longest, bottom=0.85, top=0.6)
    ax = fig.add_subplot()
    y = np.arange(len(shown))
    ax.barh(y - 0.2, [oks[i] for i in shown], height=0.4, label="mean OKS term", color="#3b75af")
    ax.barh(y + 0.2, [pck[i] for i in shown], height=0.4, label="PCK@0.05", color="#ef8636")
    ax.set_yticks(y, [str(names[i]) for i in shown], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlim(0, 1)
    ax.set(xlabel="accuracy", title=title)
    fig.legend(loc="lower center", ncol=2, fontsize=8, frameon=False)  # under the axis, over no bar
    ax.grid(axis="x", alpha=0.3)
    return _rgb(fig)


def confusion_image(confusion: np.ndarray, names: Sequence[str], title: str) -> np.ndarray:
    """The confusion matrix (rows: ground truth, columns: prediction) normalised per row, over the classes present
    in the ground truth or the prediction; cells carry their percentage when there are at most 15 classes."""
    confusion = np.asarray(confusion, dtype=np.float64)
    present = np.flatnonzero((confusion.sum(0) + confusion.sum(1)) > 0)
    if present.size == 0:
        present = np.arange(len(names))
    cm = confusion[np.ix_(present, present)]
    rows = cm / np.maximum(cm.sum(1, keepdims=True), 1.0)
    labels = [str(names[i]) for i in present]
    margin = 0.6 + LABEL_CHAR_INCH * max(len(label) for label in labels)
    size = max(0.3 * len(present), 4.0) + margin + 0.5
    fig = _figure(size + 1.5, size, left=margin, bottom=margin, top=0.5, right=1.5)
    ax = fig.add_subplot()
    shown = ax.imshow(rows, cmap="Blues", vmin=0, vmax=1)
    ax.set_xticks(range(len(labels)), labels, rotation=90, fontsize=7)
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    if len(labels) <= 15:
        for r in range(len(labels)):
            for c in range(len(labels)):
                if cm[r].sum() > 0:
                    ax.text(c, r, f"{100 * rows[r, c]:.0f}", ha="center", va="center", fontsize=7,
                            color="white" if rows[r, c] > 0.5 else "black")
    ax.set(xlabel="prediction", ylabel="ground truth", title=title)
    width, height = fig.get_size_inches()
    bar = fig.add_axes((1 - 1.1 / width, margin / height, 0.15 / width, 1 - (margin + 0.5) / height))
    fig.colorbar(shown, cax=bar, label="fraction of the true class's pixels")
    return _rgb(fig)


def error_histogram(name: str, bins: Bins, counts: Tensor | np.ndarray, xlabel: str, title: str,
                    log_y: bool = False) -> Diagnostics:
    """A dense metric's diagnostics: the ``<name>`` table and picture of one error histogram."""
    return Diagnostics({name: histogram_table(bins, counts)},
                       {name: histogram_image(bins, counts, xlabel, title, log_y)})
