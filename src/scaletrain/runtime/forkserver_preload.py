"""Imported once, by multiprocessing's forkserver when it starts (see child_processes.py).

The forkserver dies with the training process that started it; every process the
forkserver forks (DataLoader workers) dies with the forkserver. Neither ends on SIGTERM:
Slurm (scancel, the time limit) and torchrun (when it stops) send it to every process, and
a worker that died of it would crash its rank ("DataLoader worker exited unexpectedly")
before the rank saves the checkpoint SIGTERM asks for; they end with the rank instead.
Nothing else imports this.
"""

from __future__ import annotations

import os
import signal

from scaletrain.runtime.child_processes import die_with_parent

_FORKSERVER = os.getpid()

# Its parent is the training process (no pid to check against: it started moments ago).
die_with_parent()
# Ignored here, and so in every worker forked from here (forkserver resets only SIGCHLD/SIGINT).
signal.signal(signal.SIGTERM, signal.SIG_IGN)
os.register_at_fork(after_in_child=lambda: die_with_parent(_FORKSERVER))
