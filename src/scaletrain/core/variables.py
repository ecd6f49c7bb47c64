"""Every environment variable that scaletrain sets or reads for itself, and why (variables.toml).

Code names a variable through the constants below; its meaning (the comment of its `export`
line in a job, the option that overrides it) is read from the one table.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache
from importlib.resources import files

from scaletrain.core.toml_text import parse_toml

RUN_DIR = "SCALETRAIN_RUN_DIR"
"""The run folder, set by `scaletrain run` and generated jobs, read once by `st.init()`."""
TMPDIR = "TMPDIR"
"""`scaletrain run`: a temporary folder of the run's own, removed when the run ends."""
TORCHINDUCTOR_CACHE_DIR = "TORCHINDUCTOR_CACHE_DIR"
"""`scaletrain run`: torch.compile's cache, kept outside the run's TMPDIR (it outlives runs)."""
EXPECTED_CPU_MASKS = "SCALETRAIN_EXPECTED_CPU_MASKS"
EXPECTED_GPUS_PER_NODE = "SCALETRAIN_EXPECTED_GPUS_PER_NODE"
DATALOADER_WORKERS = "SCALETRAIN_DATALOADER_WORKERS"
MIN_FREE_GB = "SCALETRAIN_MIN_FREE_GB"
RENDEZVOUS_TIMEOUT = "SCALETRAIN_RENDEZVOUS_TIMEOUT"
EXPECT_NET_PLUGIN = "SCALETRAIN_EXPECT_NET_PLUGIN"
MONITOR_INTERVAL = "SCALETRAIN_MONITOR_INTERVAL"
"""Seconds between the monitor's samples; exported after the preflight, for training only."""
PROFILE = "SCALETRAIN_PROFILE"
"""RANKS[:WAIT,WARMUP,ACTIVE]: profile these ranks (st.profile, the instrumented entry)."""
STOP_AFTER_STEPS = "SCALETRAIN_STOP_AFTER_STEPS"
"""The instrumented entry ends the script after this many optimizer steps (scaletrain scale)."""
REHEARSAL_STEPS = "SCALETRAIN_REHEARSAL_STEPS"
"""A rehearsal (`submit --rehearse`): the Checkpointer saves after this many steps, resumes from
that checkpoint, trains as many more and stops."""
JOB_STARTED = "SCALETRAIN_JOB_STARTED"
"""When the job's batch shell started (s since the epoch): a rehearsal's start-up is measured
from it."""
HANG_LIMIT = "SCALETRAIN_HANG_LIMIT"
"""The hang watchdog's --hang-limit (seconds, 0: off); the ranks pace their heartbeats by it."""
REQUEUE_COUNT = "SCALETRAIN_REQUEUE_COUNT"
"""Requeues of a run that Slurm does not count: the job script resubmitted it as a new job."""
SCRIPT_VARIABLES = "SCALETRAIN_SCRIPT_VARIABLES"
CPU_MASKS = "SCALETRAIN_CPU_MASKS"


@dataclass(frozen=True, kw_only=True, slots=True)
class Variable:
    """One row of variables.toml."""

    name: str
    why: str
    """Why a job exports it: the comment above its `export` line."""
    option: str | None = None
    """The command-line option that overrides it (preflight inputs only)."""
    help: str = ""


@cache
def variable_table() -> dict[str, Variable]:
    """Every row of variables.toml, by variable name."""
    table = parse_toml((files("scaletrain.core") / "variables.toml").read_text("utf-8"))
    return {name: Variable(name=name, **row) for name, row in table.items()}


def reason(name: str) -> str | None:
    """Why a job exports `name`; None for variables the table does not know (a profile's)."""
    row = variable_table().get(name)
    return row.why if row else None
