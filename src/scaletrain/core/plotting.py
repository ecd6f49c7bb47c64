"""PNG files with matplotlib, for every part that draws (bench, monitor, analyze, scale).

matplotlib is an optional extra (`pip install 'scaletrain[plots]'`): it is imported only
when a figure is made, and the parts that draw ask `plots_available()` first.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any


def plots_available() -> bool:
    return importlib.util.find_spec("matplotlib") is not None


def pyplot() -> Any:
    """matplotlib.pyplot drawing into files only: compute and login nodes have no display."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def save_figure(figure: Any, path: Path, *, dpi: int = 110) -> Path:
    """Write `figure` to `path` (folders made as needed) and free it."""
    figure.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, dpi=dpi)
    pyplot().close(figure)
    return path
