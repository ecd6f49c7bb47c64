"""A PNG of bus bandwidth against message size, one line per collective.

matplotlib is an optional extra (`pip install 'scaletrain[plots]'`); it is imported only here.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from scaletrain.diagnose.bandwidth import BandwidthRow, format_size


def plots_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("matplotlib") is not None


def plot_bandwidth(rows: Sequence[BandwidthRow], title: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display on compute nodes
    import matplotlib.pyplot as plt

    figure, axes = plt.subplots(figsize=(8, 4.5))
    for op in dict.fromkeys(row.op for row in rows):
        mine = [row for row in rows if row.op == op]
        axes.plot([r.size_bytes for r in mine], [r.busbw_gbps for r in mine], marker="o", label=op)
    sizes = sorted({row.size_bytes for row in rows})
    axes.set_xscale("log", base=2)
    axes.set_xticks(sizes, [format_size(size) for size in sizes], rotation=45)
    axes.set_xlabel("message size (bytes)")
    axes.set_ylabel("bus bandwidth (GB/s)")
    axes.set_title(title)
    axes.grid(True, alpha=0.3)
    axes.legend()
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=120)
    plt.close(figure)
