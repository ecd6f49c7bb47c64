"""`scaletrain status`: where a run stands, a Slurm job or a local launch, its progress, and
how long the training has been silent. The record is launch/run_status.py's; this shows it."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from scaletrain.cli.common import (
    JSON_OPTION,
    RUN_ARGUMENT,
    RUNS_DIR_OPTION,
    newest_launch,
    process_environ,
    summary_value,
)
from scaletrain.cli.rehearsal_status import rehearsal_status
from scaletrain.core import console
from scaletrain.core.errors import ScaletrainError
from scaletrain.core.progress_line import format_duration
from scaletrain.core.run_folder import RunFolder
from scaletrain.core.run_record import RunRecord
from scaletrain.launch.local_status import on_this_machine
from scaletrain.launch.run_status import JobStatus, job_status, local_status
from scaletrain.slurm.history import JobEvent

# A row of the table: label, then the value's pieces (text, or (text, style)).
Row = tuple[str, console.Piece]

# What each phase of a training process means, for people.
_PHASES = {
    "start": "starting (no step yet)",
    "save": "saving a checkpoint",
    "outside": "outside the training loop (evaluation?)",
    "ended": "processes ended",
}


def status(
    run_name: str | None = RUN_ARGUMENT,
    runs_dir: Path = RUNS_DIR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Show where a run stands (its Slurm job or local launch) and its latest progress.

    For a Slurm job: state and reason, time, nodes, requeues. For `scaletrain run`: running,
    finished, failed or stopped, and the summary.

    Example: [bold]scaletrain status[/bold] (the newest run) or [bold]scaletrain status
    mnist-20261123-070302[/bold]
    """
    folder, events, launch = newest_launch(runs_dir, run_name)
    if isinstance(launch, RunRecord):
        fields, rows = _local(folder, launch)
    else:
        fields, rows = _slurm(folder, events, launch)
    if as_json:
        console.show_json(fields)
        return
    console.show(console.table(rows, title=f"run {folder.name}"))


def _slurm(
    folder: RunFolder, events: tuple[JobEvent, ...], job: JobEvent
) -> tuple[dict[str, Any], list[Row]]:
    environ = process_environ()
    found = job_status(folder, events, job, environ)
    fields = found.to_dict()
    info = found.info
    rows: list[Row] = [("job", found.job_id), *_state_rows(found, folder)]
    if found.node_states:
        rows.append(("node states", ", ".join(f"{n} {s}" for n, s in found.node_states.items())))
    if found.waits_on_its_exclusion:
        rows.append(
            (
                "excluded",
                (f"{found.excluded_nodes}: the job waits on this exclusion, as the partition has "
                 f"too few other nodes, and never starts by itself. Fix: scontrol update "
                 f"JobId={found.job_id} ExcNodeList= (or scaletrain cancel)", "error"),
            )
        )  # fmt: skip
    elif found.excluded_nodes:
        rows.append(("excluded", f"{found.excluded_nodes} (not used by this job)"))
    rows += [("restarts", str(found.restarts)), ("progress", found.progress or "-")]
    if found.last_step is not None:
        phase = _PHASES.get(found.phase, "")
        step = f"step {found.last_step}, {_ago(found.since_last_step_s)}"
        rows.append(("last step", step + (f" ({phase})" if phase else "")))
    elif found.uses_scaletrain is False and found.state == "RUNNING":
        rows.append(("last step", "no steps reported (the script does not use scaletrain)"))
    rows.append(("last output", _ago(found.since_last_output_s)))
    if found.hang:
        rows.append(("watchdog", (f"ended a hung step at {found.hang}", "error")))
    fields["cost"] = _cost(folder, events) if info is not None and not info.is_active else None
    if fields["cost"] is not None:
        rows.append(("cost", f"{fields['cost']['summary']} (scaletrain cost {folder.name})"))
    rows.append(("output", found.output or _no_output(found, folder)))
    if "rehearsal" in job.details:  # submitted with --rehearse
        fields["rehearsal"], rehearsal_rows = rehearsal_status(folder, job, info, environ)
        rows += rehearsal_rows
    return fields, rows


def _state_rows(found: JobStatus, folder: RunFolder) -> list[Row]:
    info = found.info
    if info is None:
        return [
            (
                "state",
                ("unknown: Slurm no longer knows this job (it ended a while ago and this "
                 "site keeps no accounting)", "warning"),
            )
        ]  # fmt: skip
    style = "info" if info.is_active else "success" if info.state == "COMPLETED" else "error"
    nodes = f"{info.num_nodes} ({info.nodelist})" if info.nodelist else str(info.num_nodes)
    return [
        ("state", (info.state_with_reason, style)),
        ("time", f"{found.elapsed or '-'} of {info.time_limit or '-'}"),
        ("nodes", nodes),
    ]


def _no_output(found: JobStatus, folder: RunFolder) -> str:
    if found.info is not None and found.state == "PENDING":
        return "- (the job has not started yet)"
    return f"- (none in {folder.logs}/)"


def _cost(folder: RunFolder, events: tuple[JobEvent, ...]) -> dict[str, Any] | None:
    """What the ended job cost (`scaletrain cost`), where the site keeps accounting."""
    from scaletrain.cli.cost import measure  # only once a job has ended
    from scaletrain.observe.cost.text import summary

    try:
        found = measure(folder, events)
    except ScaletrainError:
        return None  # no plan, or accounting knows no run of it: status has said the rest
    return None if found is None else {"summary": summary(found), **found.to_dict()}


def _ago(seconds: float | None) -> str:
    return f"{format_duration(seconds)} ago" if seconds is not None else "-"


def _local(folder: RunFolder, record: RunRecord) -> tuple[dict[str, Any], list[Row]]:
    found = local_status(folder, record)
    rows: list[Row] = [
        ("where", f"this machine ({record.host})" if on_this_machine(record) else record.host),
        ("command", shlex.join(found.command)),
        ("state", (found.state, found.state_style)),
        ("started", found.started or "-"),
        ("finished", found.finished or "-"),
        ("progress", found.progress or "-"),
    ]
    rows += [(str(name), summary_value(value)) for name, value in (found.summary or {}).items()]
    rows.append(("logs", f"{folder.logs}/rank-<N>.out|.err"))
    return found.to_dict(), rows
