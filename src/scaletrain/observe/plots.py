"""PNG charts shared by the trace analysis and the scaling study: stacked bars and lines.

matplotlib is imported only when a figure is made (core/plotting.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from scaletrain.core.plotting import pyplot, save_figure


def plot_stacked_bars(
    categories: Mapping[str, Sequence[float]],
    labels: Sequence[str],
    title: str,
    unit: str,
    path: Path,
) -> Path:
    """One bar per label, stacked by category (e.g. compute, communication, idle per rank)."""
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(max(5.0, 1.0 + 0.7 * len(labels)) + 2.5, 4))
    bottoms = [0.0] * len(labels)
    for name, values in categories.items():
        axis.bar(labels, values, bottom=bottoms, label=name)
        bottoms = [bottom + value for bottom, value in zip(bottoms, values, strict=True)]
    axis.set_ylabel(unit)
    axis.set_title(title)
    axis.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.0, 1.0))  # beside the bars
    axis.grid(True, axis="y", alpha=0.3)
    return save_figure(figure, path)


def plot_lines(
    series: Mapping[str, tuple[Sequence[float], Sequence[float]]],
    title: str,
    x_label: str,
    y_label: str,
    path: Path,
    *,
    log_x: bool = False,
    styles: Mapping[str, str] | None = None,
) -> Path:
    """Named (x, y) series on one axis; `styles` gives a matplotlib format per series."""
    plt = pyplot()
    figure, axis = plt.subplots(figsize=(7, 4.2))
    for name, (xs, ys) in series.items():
        axis.plot(xs, ys, (styles or {}).get(name, "o-"), label=name)
    if log_x:
        axis.set_xscale("log", base=2)
    axis.set_xlabel(x_label)
    axis.set_ylabel(y_label)
    axis.set_title(title)
    axis.grid(True, alpha=0.3)
    axis.legend(fontsize="small")
    return save_figure(figure, path)
