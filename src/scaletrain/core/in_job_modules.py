"""The programs scaletrain starts inside jobs and runs with `python -m`.

Named here without importing them: they import torch or psutil, which the login-node
commands that start them (`run`, `submit`, job scripts) must not load.
"""

from __future__ import annotations

# The preflight check (scaletrain.diagnose), run on every rank before training.
PREFLIGHT = "scaletrain.diagnose.preflight"
# The per-node sampler of GPU and CPU use (`scaletrain monitor`).
SAMPLER = "scaletrain.observe.monitor.sampler"
# The entry that profiles and times an unchanged script (`--profile`, scaling studies).
INSTRUMENT = "scaletrain.observe.profile.instrument"
# The hang watchdog, run by the batch shell beside the training step.
WATCHDOG = "scaletrain.launch.watchdog"
