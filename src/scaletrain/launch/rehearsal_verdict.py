"""Whether a run's rehearsal (`submit --rehearse`) passed, as `scaletrain status` tells it:
Slurm's state of the rehearsal job while Slurm knows it, else the verdict line the job script
printed (templates/rehearsal.j2 and hang.j2), for a job that Slurm without accounting forgot.
And whether Slurm cancelled the real job because its rehearsal failed."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from scaletrain.core.files import read_text
from scaletrain.slurm.output import JobInfo

Verdict = Literal["running", "passed", "failed", "unknown"]

# The beginnings of the job script's verdict lines.
PASSED_LINE, FAILED_LINE = "scaletrain: rehearsal passed", "scaletrain: rehearsal failed"
# Slurm's reason for a job whose --dependency=afterok can no longer be met.
_NEVER_SATISFIED = "DependencyNeverSatisfied"


def rehearsal_verdict(info: JobInfo | None, log: Path | None) -> Verdict:
    """running, passed, failed or unknown: Slurm's state (`info`, None once it forgot the
    job), else the job's own verdict line in its output `log`."""
    if info is not None:
        if info.is_active:
            return "running"
        return "passed" if info.state == "COMPLETED" else "failed"
    text = read_text(log, "rehearsal output", errors="replace") if log else ""
    if PASSED_LINE in text:
        return "passed"
    return "failed" if FAILED_LINE in text else "unknown"


def cancelled_by_its_rehearsal(real: JobInfo | None) -> bool:
    """Whether Slurm cancelled the real job before it started, its rehearsal having failed
    (its afterok dependency can never be met)."""
    return real is not None and real.state == "CANCELLED" and _NEVER_SATISFIED in real.reason
