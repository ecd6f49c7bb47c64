"""What a job does after its watchdog ended a hung training step: requeue or not, and without
which nodes. Decided here, where it is tested, and written for the job script as key=value
lines (hang.env) that bash reads without a parser; the script only runs the scontrol and
sbatch commands, which exist in its batch shell but not in a container.

What Slurm knows of the job comes from the batch shell, which asks scontrol when it starts the
watchdog (`scontrol --oneliner show job` and `show partition`): the nodes the job already
leaves out, and how many the partition has. Leaving out nodes the job cannot do without
would keep it waiting in the queue for ever (BadConstraints), so then it keeps them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import hostlist

from scaletrain.core.variables import REQUEUE_COUNT
from scaletrain.slurm.output import parse_oneliners

# What scontrol shows for a list it does not have.
_NONE = "(null)"


@dataclass(frozen=True, kw_only=True, slots=True)
class SlurmJob:
    """The job as its batch shell saw it when training started."""

    nodes: int
    partition: str = ""
    excluded: tuple[str, ...] = ()
    """Nodes the job already leaves out (its ExcNodeList), one name each."""
    partition_nodes: int | None = None
    """Nodes of the job's partition; None when scontrol did not say."""
    requeues: int = 0
    """Requeues so far: Slurm's restart count and the resubmissions it does not count."""


@dataclass(frozen=True, kw_only=True, slots=True)
class HangRequeue:
    """What the job script does next."""

    requeue: bool
    restart_count: int = 0
    """The next run's requeue number."""
    exclude: str = ""
    """The next run's excluded nodes, as Slurm's ExcNodeList and --exclude take them."""
    kept: str = ""
    """Nodes that would have been left out, but the job cannot run without them."""
    changed: bool = False
    """`exclude` differs from the job's own list: the job must be updated."""
    message: str = ""

    @property
    def event(self) -> str:
        """The fields of the job history's `requeued` line (jobs.jsonl), as JSON members."""
        fields: dict[str, object] = {"restart_count": self.restart_count, "reason": "hang"}
        fields["excluded"] = self.exclude
        if self.kept:
            fields["kept"] = self.kept
        return "".join(
            f", {json.dumps(name)}: {json.dumps(value)}" for name, value in fields.items()
        )

    def lines(self) -> str:
        """key=value lines, one value per line, for `while IFS== read -r key value`."""
        values = {
            "requeue": "yes" if self.requeue else "",
            "restart_count": str(self.restart_count),
            "exclude": self.exclude,
            "changed": "yes" if self.changed else "",
            "event": self.event,
            "message": self.message,
        }
        for name, value in values.items():
            if "\n" in value or "\r" in value:
                raise ValueError(f"{name} of a hang decision has a line break: {value!r}")
        return "".join(f"{name}={value}\n" for name, value in values.items())


def read_slurm_job(job_line: str, partition_line: str, environ: Mapping[str, str]) -> SlurmJob:
    """The job from scontrol's one-line answers (empty when it failed) and its environment."""
    job = next(iter(parse_oneliners(job_line)), {})
    partition = next(iter(parse_oneliners(partition_line)), {})
    excluded = job.get("ExcNodeList", "")
    requeues = _count(environ.get("SLURM_RESTART_COUNT")) + _count(environ.get(REQUEUE_COUNT))
    total = partition.get("TotalNodes", "")
    return SlurmJob(
        nodes=_count(environ.get("SLURM_JOB_NUM_NODES") or job.get("NumNodes")),
        partition=partition.get("PartitionName", job.get("Partition", "")),
        excluded=tuple(hostlist.expand_hostlist(excluded)) if excluded not in ("", _NONE) else (),
        partition_nodes=int(total) if total.isdigit() else None,
        requeues=requeues,
    )


def decide_requeue(blamed: Sequence[str], job: SlurmJob, max_requeues: int) -> HangRequeue:
    """Requeue without the blamed nodes while requeues are left, keeping them where the
    partition has too few others."""
    if job.requeues >= max_requeues:
        return HangRequeue(
            requeue=False,
            message=(
                f"training hung; not requeued: the job was requeued {job.requeues} times "
                f"(--max-requeues {max_requeues}). Submit the run again to continue it."
            ),
        )
    names = [*job.excluded, *(node for node in blamed if node not in job.excluded)]
    count = f"(requeue {job.requeues + 1} of at most {max_requeues})"
    left = (job.partition_nodes or 0) - len(names)
    if names and left < job.nodes:
        kept = hostlist.collect_hostlist(names)
        total = "?" if job.partition_nodes is None else job.partition_nodes
        message = (
            f"training hung; continuing the run on the same nodes {count}: partition "
            f"{job.partition} has {total} nodes, and this {job.nodes}-node job could never "
            f"run again without '{kept}'"
        )
        return HangRequeue(
            requeue=True,
            restart_count=job.requeues + 1,
            kept=kept,
            changed=bool(job.excluded),
            message=message,
        )
    exclude = hostlist.collect_hostlist(names) if names else ""
    without = f" without nodes {exclude}" if exclude else ""
    return HangRequeue(
        requeue=True,
        restart_count=job.requeues + 1,
        exclude=exclude,
        changed=tuple(names) != job.excluded,
        message=f"training hung; continuing the run{without} {count}",
    )


def write_decision(path: Path, decision: HangRequeue) -> None:
    """hang.env, complete or not at all."""
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(decision.lines(), encoding="utf-8")
    temporary.replace(path)


def _count(text: str | None) -> int:
    return int(text) if text and text.isdigit() else 0
