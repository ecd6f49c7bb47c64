"""Where a run stands, as `scaletrain status` shows it and prints it with --json: its current
Slurm job (state, time, nodes, requeues, the ranks' last step, the hang watchdog's report)
or its local launch (`scaletrain run`: running, or how it ended)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Any

from scaletrain.core.hang_report import read_hang_report
from scaletrain.core.progress_line import last_progress_line
from scaletrain.core.rank_files import RankBeat, read_beats, since_last_step
from scaletrain.core.run_folder import RunFolder
from scaletrain.core.run_record import RunRecord
from scaletrain.launch.local_status import local_state, read_run_json
from scaletrain.slurm import commands as slurm
from scaletrain.slurm.history import JobEvent, job_output_file, requeue_count
from scaletrain.slurm.output import JobInfo


@dataclass(frozen=True, kw_only=True, slots=True)
class JobStatus:
    """A run's current Slurm job. Every field but `info` is in the --json record."""

    run: str
    where: str = "slurm"
    job_id: str
    state: str
    """Slurm's state (RUNNING, PENDING, ...), UNKNOWN once Slurm forgot the job."""
    reason: str
    elapsed: str
    """How long the job ran; '' for one that never got nodes."""
    time_limit: str
    num_nodes: int | None
    nodelist: str
    node_states: dict[str, str]
    """Slurm's state of each node of an active job (ALLOCATED, DOWN+NOT_RESPONDING, ...)."""
    excluded_nodes: str
    waits_on_its_exclusion: bool
    """The partition has too few nodes besides the excluded ones: the job never starts."""
    restarts: int
    progress: str | None
    """The last progress line of metrics/train.jsonl."""
    last_step: int | None
    since_last_step_s: float | None
    phase: str
    """Where training is: loop, start, save, outside, ended; '' before any heartbeat."""
    uses_scaletrain: bool | None
    """Whether the script reports its steps, as `submit` read it (None: not noted)."""
    since_last_output_s: float | None
    hang: str | None
    """The watchdog's report, if it ended a step of this job."""
    output: str | None
    folder: str
    info: JobInfo | None = field(default=None, compare=False)
    """Slurm's view of the job; None once Slurm no longer knows it."""

    def to_dict(self) -> dict[str, Any]:
        return {
            item.name: getattr(self, item.name)
            for item in dataclasses.fields(self)
            if item.name != "info"
        }


@dataclass(frozen=True, kw_only=True, slots=True)
class LocalStatus:
    """A run's local launch (run.json). Every field but `state_style` is in the --json record."""

    run: str
    where: str = "local"
    host: str
    command: list[str]
    """The script (or module) and its arguments, as the user gave them."""
    state: str
    started: str
    finished: str | None
    exit_code: int | None
    duration_s: float | None
    progress: str | None
    summary: dict[str, Any] | None
    """metrics/summary.json, which training writes when it ends."""
    folder: str
    state_style: str = field(default="info", compare=False)
    """How the state reads: info (running), success, warning (stopped, lost) or error."""

    def to_dict(self) -> dict[str, Any]:
        return {
            item.name: getattr(self, item.name)
            for item in dataclasses.fields(self)
            if item.name != "state_style"
        }


def job_status(
    folder: RunFolder, events: tuple[JobEvent, ...], job: JobEvent, environ: Mapping[str, str]
) -> JobStatus:
    """The status of `job`, the run's current Slurm job, from Slurm and the run folder."""
    info = slurm.job_info(job.job_id, environ=environ)
    output_file = job_output_file(folder, job.job_id)
    beats = read_beats(folder)
    restarts = info.restarts if info and info.restarts is not None else None
    return JobStatus(
        run=folder.name,
        job_id=job.job_id,
        state=info.state if info else "UNKNOWN",
        reason=info.reason if info else "",
        # Slurm 22.05 counts the run time of a job cancelled while pending from 1970:
        # RunTime=20785-10:17:23.
        elapsed=info.elapsed if info is not None and info.nodelist else "",
        time_limit=info.time_limit if info else "",
        num_nodes=info.num_nodes if info else None,
        nodelist=info.nodelist if info else "",
        node_states=_node_states(info, environ),
        excluded_nodes=info.excluded_nodes if info else "",
        waits_on_its_exclusion=info.waits_on_its_exclusion if info else False,
        restarts=restarts if restarts is not None else requeue_count(events, job.job_id),
        progress=last_progress_line(folder.metrics / "train.jsonl"),
        last_step=max((beat.step for beat in beats.values()), default=None),
        since_last_step_s=_rounded(since_last_step(beats)),
        phase=_phase(beats),
        uses_scaletrain=_uses_scaletrain(events),
        since_last_output_s=_rounded(
            time.time() - output_file.stat().st_mtime if output_file else None
        ),
        hang=_hang_summary(folder, events),
        output=str(output_file) if output_file else None,
        folder=str(folder.root),
        info=info,
    )


def local_status(folder: RunFolder, record: RunRecord) -> LocalStatus:
    """The status of the run's local launch, from run.json and the run folder."""
    state, style = local_state(folder, record)
    return LocalStatus(
        run=folder.name,
        host=record.host,
        command=list(record.program),
        state=state,
        started=record.started,
        finished=record.finished,
        exit_code=record.exit_code,
        duration_s=record.duration_s,
        progress=last_progress_line(folder.metrics / "train.jsonl"),
        summary=read_run_json(folder.metrics / "summary.json"),
        folder=str(folder.root),
        state_style=style,
    )


def _node_states(info: JobInfo | None, environ: Mapping[str, str]) -> dict[str, str]:
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
