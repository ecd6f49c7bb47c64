"""Imported once, by multiprocessing's forkserver when it starts (see child_processes.py).

The forkserver dies with the training process that started it; every process the
forkserver forks (DataLoader workers) dies with the forkserver. The forkserver ignores
SIGTERM (the workers' own start ignores it too, see child_processes.py). Nothing else
imports this.
"""

from __future__ import annotations

import os
import signal

from scaletrain.core.parent_death import die_with_parent

_FORKSERVER = os.getpid()

# Its parent is the training process (no pid to check against: it started moments ago).
die_with_parent()
signal.signal(signal.SIGTERM, signal.SIG_IGN)
os.register_at_fork(after_in_child=lambda: die_with_parent(_FORKSERVER))
