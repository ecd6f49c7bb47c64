"""The cores this process may run on, which a launcher shares out among the processes it
starts (`scaletrain run`) and a training process counts as its own (runtime/layout.py)."""

from __future__ import annotations

import os


def allowed_cpus() -> int:
    """Cores this process may run on (its affinity mask), not the cores of the machine."""
    return len(os.sched_getaffinity(0))
