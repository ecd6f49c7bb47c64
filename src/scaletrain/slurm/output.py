"""What Slurm's commands print, read into values (slurm/commands.py runs the commands).

`scontrol show <thing> --oneliner` prints one line of Key=value pairs per item; `sacct
--parsable2` prints '|'-separated fields in the order asked for.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

# States in which a job still holds or waits for resources (Slurm's JOB_STATE_BASE names
# plus the flags squeue/scontrol print on their own); every other state is final.
ACTIVE_STATES = frozenset(
    {
        "PENDING",
        "CONFIGURING",
        "RUNNING",
        "COMPLETING",
        "SUSPENDED",
        "REQUEUED",
        "REQUEUE_HOLD",
        "REQUEUE_FED",
        "RESIZING",
        "SIGNALING",
        "STAGE_OUT",
        "STOPPED",
        "RESV_DEL_HOLD",
    }
)

# `Key=value` pairs of `scontrol show ... -o`. Keys start with a capital letter and may hold
# '/' and ':' (CPUs/Task, AllocNode:Sid); values may contain spaces (OS=Linux 6.1 #1 SMP).
_KEY = re.compile(r"(?:^|\s)([A-Z][A-Za-z0-9_/:]*)=")


@dataclass(frozen=True, kw_only=True, slots=True)
class JobInfo:
    """What Slurm knows about one job, from scontrol (recent jobs) or sacct (accounting)."""

    job_id: str
    name: str
    state: str
    """Slurm's state word: PENDING, RUNNING, COMPLETED, FAILED, CANCELLED, TIMEOUT, ..."""
    reason: str
    """Why it waits or why it ended (Priority, Resources, NonZeroExitCode); '' when none."""
    elapsed: str
    """Run time so far as Slurm prints it, [days-]hours:minutes:seconds."""
    time_limit: str
    num_nodes: int | None
    nodelist: str
    """Compressed host list (n[1-2]); '' while the job waits."""
    restarts: int | None
    """Times the job was requeued; None where the source does not say (sacct)."""
    exit_code: str
    """exit code:signal of the batch script, e.g. 0:0."""
    excluded_nodes: str = ""
    """Nodes the job must not run on (ExcNodeList), e.g. after the hang watchdog blamed them."""

    @property
    def is_active(self) -> bool:
        """True while the job waits or runs; False once it ended in any way."""
        return self.state in ACTIVE_STATES

    @property
    def waits_on_its_exclusion(self) -> bool:
        """Pending only because of the nodes it excludes: the partition has too few others, so
        it never starts by itself (Slurm's reason: BadConstraints)."""
        return (
            self.state == "PENDING"
            and bool(self.excluded_nodes)
            and self.reason == "BadConstraints"
        )

    @property
    def state_with_reason(self) -> str:
        """PENDING (Priority), RUNNING, FAILED (NonZeroExitCode), ..."""
        return f"{self.state} ({self.reason})" if self.reason else self.state


@dataclass(frozen=True, kw_only=True, slots=True)
class SlurmPartition:
    """One partition of `scontrol show partition`."""

    name: str
    nodes: str
    """Compressed host list of its nodes."""
    total_nodes: int
    total_cpus: int
    max_time: str
    """UNLIMITED or [days-]hours:minutes:seconds."""
    default_time: str
    max_nodes: str
    state: str
    is_default: bool


@dataclass(frozen=True, kw_only=True, slots=True)
class SlurmNode:
    """One node of `scontrol show node`."""

    name: str
    address: str
    state: str
    """IDLE, MIXED, ALLOCATED, DOWN+DRAIN, ... as Slurm prints it."""
    cpus: int
    real_memory_mb: int
    gres: str
    """Generic resources such as gpu:a100:4; '' when none."""
    features: tuple[str, ...]
    partitions: tuple[str, ...]


def parse_key_values(line: str) -> dict[str, str]:
    """Split one line of `scontrol show ... -o` into its fields; '(null)' becomes ''."""
    matches = list(_KEY.finditer(line))
    fields: dict[str, str] = {}
    for match, following in zip(matches, [*matches[1:], None], strict=True):
        end = following.start() if following is not None else len(line)
        value = line[match.end() : end].strip()
        fields[match.group(1)] = "" if value == "(null)" else value
    return fields


def parse_oneliners(output: str) -> list[dict[str, str]]:
    """The fields of every item in the output of `scontrol show <thing> --oneliner`."""
    return [parse_key_values(line) for line in output.splitlines() if line.strip()]


def job_from_scontrol(fields: Mapping[str, str]) -> JobInfo:
    """A job from the fields of one `scontrol show job --oneliner` line."""
    return JobInfo(
        job_id=fields.get("JobId", ""),
        name=fields.get("JobName", ""),
        state=fields.get("JobState", "UNKNOWN"),
        reason=_reason(fields.get("Reason", "")),
        elapsed=fields.get("RunTime", ""),
        time_limit=fields.get("TimeLimit", ""),
        num_nodes=_optional_int(fields.get("NumNodes", "").split("-")[0]),
        nodelist=fields.get("NodeList", ""),
        restarts=_optional_int(fields.get("Restarts", "")),
        exit_code=fields.get("ExitCode", ""),
        excluded_nodes=fields.get("ExcNodeList", ""),
    )


SACCT_FIELDS = (
    "JobID",
    "JobName",
    "State",
    "Reason",
    "Elapsed",
    "Timelimit",
    "NNodes",
    "NodeList",
    "ExitCode",
)


def job_from_sacct_line(line: str) -> JobInfo | None:
    """A job from one line of `sacct --parsable2 --format=<SACCT_FIELDS>`; None if malformed."""
    values = dict(zip(SACCT_FIELDS, line.split("|"), strict=False))
    if len(values) != len(SACCT_FIELDS):
        return None
    return JobInfo(
        job_id=values["JobID"],
        name=values["JobName"],
        # sacct writes "CANCELLED by 1234"; the state is the first word.
        state=(values["State"] or "UNKNOWN").split()[0],
        reason=_reason(values["Reason"]),
        elapsed=values["Elapsed"],
        time_limit=values["Timelimit"],
        num_nodes=_optional_int(values["NNodes"]),
        nodelist=values["NodeList"].replace("None assigned", ""),
        restarts=None,
        exit_code=values["ExitCode"],
    )


@dataclass(frozen=True, kw_only=True, slots=True)
class AccountedRun:
    """One run of a job's allocation as accounting keeps it: the first, or one after a requeue
    (`sacct --duplicates` lists each)."""

    job_id: str
    state: str
    """REQUEUED for a run that was requeued; the job's final state for its last run."""
    start: float | None
    """Seconds since the epoch; None before it started."""
    end: float | None
    """Seconds since the epoch; None while it runs."""
    elapsed_s: int
    """What the site bills: the allocation's time from start to end (or to now)."""
    nodes: int | None
    energy_joules: int | None
    """ConsumedEnergyRaw; None where the site measures no energy (Slurm then says 0 or '')."""


# `sacct --duplicates --allocations` with SLURM_TIME_FORMAT=%s: start and end as epoch seconds.
SACCT_RUN_FIELDS = (
    "JobIDRaw",
    "State",
    "Start",
    "End",
    "ElapsedRaw",
    "NNodes",
    "ConsumedEnergyRaw",
)


def run_from_sacct_line(line: str) -> AccountedRun | None:
    """One run from a line of `sacct --parsable2 --format=<SACCT_RUN_FIELDS>`; None if malformed."""
    values = dict(zip(SACCT_RUN_FIELDS, line.split("|"), strict=False))
    if len(values) != len(SACCT_RUN_FIELDS) or not values["ElapsedRaw"].isdigit():
        return None
    return AccountedRun(
        job_id=values["JobIDRaw"],
        state=(values["State"] or "UNKNOWN").split()[0],
        start=_epoch(values["Start"]),
        end=_epoch(values["End"]),
        elapsed_s=int(values["ElapsedRaw"]),
        nodes=_optional_int(values["NNodes"]),
        energy_joules=_optional_int(values["ConsumedEnergyRaw"]) or None,
    )


def _epoch(text: str) -> float | None:
    """Seconds since the epoch, or None for Slurm's Unknown/None (not started, still running)."""
    return float(text) if text.isdigit() else None


def partition_from_fields(fields: Mapping[str, str]) -> SlurmPartition:
    """A partition from the fields of one `scontrol show partition --oneliner` line."""
    return SlurmPartition(
        name=fields["PartitionName"],
        nodes=fields.get("Nodes", ""),
        total_nodes=_optional_int(fields.get("TotalNodes", "")) or 0,
        total_cpus=_optional_int(fields.get("TotalCPUs", "")) or 0,
        max_time=fields.get("MaxTime", ""),
        default_time=fields.get("DefaultTime", ""),
        max_nodes=fields.get("MaxNodes", ""),
        state=fields.get("State", ""),
        is_default=fields.get("Default") == "YES",
    )


def node_from_fields(fields: Mapping[str, str]) -> SlurmNode:
    """A node from the fields of one `scontrol show node --oneliner` line."""
    return SlurmNode(
        name=fields["NodeName"],
        address=fields.get("NodeAddr", ""),
        state=fields.get("State", ""),
        cpus=_optional_int(fields.get("CPUTot", "")) or 0,
        real_memory_mb=_optional_int(fields.get("RealMemory", "")) or 0,
        gres=fields.get("Gres", ""),
        features=_words(fields.get("AvailableFeatures", "")),
        partitions=_words(fields.get("Partitions", "")),
    )


def _words(comma_separated: str) -> tuple[str, ...]:
    return tuple(word for word in comma_separated.split(",") if word)


def _optional_int(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def _reason(text: str) -> str:
    return "" if text == "None" else text
