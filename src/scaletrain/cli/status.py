"""`scaletrain status`: where a run stands, a Slurm job or a local launch, its progress, and
how long the training has been silent."""

from __future__ import annotations

import shlex
import time
from collections.abc import Mapping
from datetime import datetime, timezone
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
from scaletrain.cli.local_runs import local_state, on_this_machine, read_run_json
from scaletrain.core import console
from scaletrain.core.errors import ScaletrainError
from scaletrain.core.hang_report import read_hang_report
from scaletrain.core.progress_line import format_duration, last_progress_line
from scaletrain.core.rank_files import RankBeat, read_beats, since_last_step
from scaletrain.core.run_folder import RunFolder
from scaletrain.launch.local_run import RunRecord
from scaletrain.slurm import commands as slurm
from scaletrain.slurm.history import JobEvent, job_output_file, requeue_count
from scaletrain.slurm.output import JobInfo

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
    job_id = job.job_id
    environ = process_environ()
    info = slurm.job_info(job_id, environ=environ)
    output_file = job_output_file(folder, job_id)
    beats = read_beats(folder)
    restarts = info.restarts if info and info.restarts is not None else None
    fields: dict[str, Any] = {
        "run": folder.name,
        "where": "slurm",
        "job_id": job_id,
        "state": info.state if info else "UNKNOWN",
        "reason": info.reason if info else "",
        "elapsed": _run_time(info),
        "time_limit": info.time_limit if info else "",
        "num_nodes": info.num_nodes if info else None,
        "nodelist": info.nodelist if info else "",
        "node_states": _node_states(info, environ),
        "excluded_nodes": info.excluded_nodes if info else "",
        "waits_on_its_exclusion": info.waits_on_its_exclusion if info else False,
        "restarts": restarts if restarts is not None else requeue_count(events, job_id),
        "progress": last_progress_line(folder.metrics / "train.jsonl"),
        "last_step": max((beat.step for beat in beats.values()), default=None),
        "since_last_step_s": _rounded(since_last_step(beats)),
        "phase": _phase(beats),
        "uses_scaletrain": _uses_scaletrain(events),
        "since_last_output_s": _rounded(
            time.time() - output_file.stat().st_mtime if output_file else None
        ),
        "hang": _hang_summary(folder, events),
        "output": str(output_file) if output_file else None,
        "folder": str(folder.root),
    }
    rows: list[Row] = [("job", job_id)]
    if info is None:
        rows.append(
            (
                "state",
                ("unknown: Slurm no longer knows this job (it ended a while ago and this "
                 "site keeps no accounting)", "warning"),
            )
        )  # fmt: skip
        no_output = f"- (none in {folder.logs}/)"
    else:
        style = "info" if info.is_active else "success" if info.state == "COMPLETED" else "error"
        nodes = f"{info.num_nodes} ({info.nodelist})" if info.nodelist else str(info.num_nodes)
        rows += [
            ("state", (info.state_with_reason, style)),
            ("time", f"{fields['elapsed'] or '-'} of {info.time_limit or '-'}"),
            ("nodes", nodes),
        ]
        no_output = (
            "- (the job has not started yet)"
            if info.state == "PENDING"
            else f"- (none in {folder.logs}/)"
        )
    states = fields["node_states"]
    if states:
        rows.append(("node states", ", ".join(f"{n} {s}" for n, s in states.items())))
    if fields["waits_on_its_exclusion"]:
        excluded = fields["excluded_nodes"]
        rows.append(
            (
                "excluded",
                (f"{excluded}: the job waits on this exclusion, as the partition has too few "
                 f"other nodes, and never starts by itself. Fix: scontrol update "
                 f"JobId={fields['job_id']} ExcNodeList= (or scaletrain cancel)", "error"),
            )
        )  # fmt: skip
    elif fields["excluded_nodes"]:
        rows.append(("excluded", f"{fields['excluded_nodes']} (not used by this job)"))
    rows += [
        ("restarts", str(fields["restarts"])),
        ("progress", fields["progress"] or "-"),
    ]
    if fields["last_step"] is not None:
        phase = _PHASES.get(fields["phase"], "")
        step = f"step {fields['last_step']}, {_ago(fields['since_last_step_s'])}"
        rows.append(("last step", step + (f" ({phase})" if phase else "")))
    elif fields["uses_scaletrain"] is False and fields["state"] == "RUNNING":
        rows.append(("last step", "no steps reported (the script does not use scaletrain)"))
    rows.append(("last output", _ago(fields["since_last_output_s"])))
    if fields["hang"]:
        rows.append(("watchdog", (f"ended a hung step at {fields['hang']}", "error")))
    fields["cost"] = _cost(folder, events) if info is not None and not info.is_active else None
    if fields["cost"] is not None:
        rows.append(("cost", f"{fields['cost']['summary']} (scaletrain cost {folder.name})"))
    rows.append(("output", fields["output"] or no_output))
    if "rehearsal" in job.details:  # submitted with --rehearse
        # Imported here: it reads plan.toml, whose planning modules other runs do not need.
        from scaletrain.cli.rehearsal_status import rehearsal_status

        fields["rehearsal"], rehearsal_rows = rehearsal_status(folder, job, info, environ)
        rows += rehearsal_rows
    return fields, rows


def _cost(folder: RunFolder, events: tuple[JobEvent, ...]) -> dict[str, Any] | None:
    """What the ended job cost (`scaletrain cost`), where the site keeps accounting."""
    from scaletrain.cli.cost import measure, summary  # only once a job has ended

    try:
        found = measure(folder, events)
    except ScaletrainError:
        return None  # no plan, or accounting knows no run of it: status has said the rest
    return None if found is None else {"summary": summary(found), **found.to_dict()}


def _run_time(info: JobInfo | None) -> str:
    """How long the job ran; '' for one that never got nodes (Slurm 22.05 counts the run time
    of a job cancelled while pending from 1970: RunTime=20785-10:17:23)."""
    return info.elapsed if info is not None and info.nodelist else ""


def _node_states(info: JobInfo | None, environ: Mapping[str, str]) -> dict[str, str]:
    """Slurm's state of each node of the job (ALLOCATED, MIXED, DOWN+NOT_RESPONDING, ...)."""
    if info is None or not info.nodelist or not info.is_active:
        return {}
    return {node.name: node.state for node in slurm.nodes(environ=environ, names=info.nodelist)}


def _rounded(seconds: float | None) -> float | None:
    return round(seconds, 1) if seconds is not None else None


def _phase(beats: Mapping[int, RankBeat]) -> str:
    """Where training is: the phase of any rank outside the loop, else 'loop'."""
    phases = {beat.phase for beat in beats.values()}
    for phase in ("save", "start", "outside", "ended"):
        if phase in phases:
            return phase
    return "loop" if phases else ""


def _uses_scaletrain(events: tuple[JobEvent, ...]) -> bool | None:
    """Whether the run's script uses scaletrain (and so reports its steps), as `submit` read
    it; None for a run submitted by an older scaletrain, which did not note it."""
    noted = (e.details.get("uses_scaletrain") for e in reversed(events) if e.event == "submitted")
    return next((value for value in noted if isinstance(value, bool)), None)


def _hang_summary(folder: RunFolder, events: tuple[JobEvent, ...]) -> str | None:
    """The watchdog's report, if it ended a step of the current job."""
    report = read_hang_report(folder.hang_report)
    submitted = max((e.time for e in events if e.event == "submitted"), default="")
    if report is None or datetime.fromisoformat(report.time) < _moment(submitted):
        return None
    return f"{report.time[11:19]} UTC, after step {report.step}: {report.summary}"


def _moment(iso_time: str) -> datetime:
    return (
        datetime.fromisoformat(iso_time) if iso_time else datetime.min.replace(tzinfo=timezone.utc)
    )


def _ago(seconds: float | None) -> str:
    return f"{format_duration(seconds)} ago" if seconds is not None else "-"


def _local(folder: RunFolder, record: RunRecord) -> tuple[dict[str, Any], list[Row]]:
    state, style = local_state(folder, record)
    fields: dict[str, Any] = {
        "run": folder.name,
        "where": "local",
        "host": record.host,
        "command": list(record.program),
        "state": state,
        "started": record.started,
        "finished": record.finished,
        "exit_code": record.exit_code,
        "duration_s": record.duration_s,
        "progress": last_progress_line(folder.metrics / "train.jsonl"),
        "summary": _summary(folder),
        "folder": str(folder.root),
    }
    rows: list[Row] = [
        ("where", f"this machine ({record.host})" if on_this_machine(record) else record.host),
        ("command", shlex.join(record.program)),
        ("state", (state, style)),
        ("started", record.started or "-"),
        ("finished", record.finished or "-"),
        ("progress", fields["progress"] or "-"),
    ]
    rows += [(str(name), summary_value(value)) for name, value in (fields["summary"] or {}).items()]
    rows.append(("logs", f"{folder.logs}/rank-<N>.out|.err"))
    return fields, rows


def _summary(folder: RunFolder) -> dict[str, Any] | None:
    return read_run_json(folder.metrics / "summary.json")
