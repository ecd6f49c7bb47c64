"""The run folder: everything about one run in one place (see DESIGN.md).

runs/<name>/
  plan.toml      what was asked and decided     job.sbatch   the generated job script
  run.json       a local launch: command, exit  jobs.jsonl   one line per Slurm submission
  logs/          per-rank and Slurm output      checkpoints/ step-NNNNNNN/ + LATEST
  metrics/       train.jsonl, summary.json      traces/      profiler traces per rank
  report/        plots and summaries
  stop-requested / stopped.json   the graceful-stop handshake between job script and run
  resumes.jsonl  one line each time training resumed from a checkpoint
  ranks/         rank-N.json: each training process's last step (its heartbeat)
  stacks/        Python stacks of every rank, on request (`scaletrain stacks`, the watchdog)
  hang.json      the hang watchdog's report: which ranks and nodes stopped first
  hang.env       what the job script does next after a hang, as key=value lines
  programs/      what the job script runs with the job's own Python (written by submit)
  rehearsal/     the rehearsal's own run folder (`submit --rehearse`): its checkpoints never
                 seed the real run
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from scaletrain.core.errors import ScaletrainError
from scaletrain.core.variables import RUN_DIR

# Where run folders go unless the user says otherwise (`--runs-dir`).
DEFAULT_RUNS_DIR = Path("runs")


@dataclass(frozen=True, slots=True)
class RunFolder:
    """Paths inside one run folder; creating it is explicit (`create`)."""

    root: Path

    @property
    def name(self) -> str:
        return self.root.name

    @property
    def plan(self) -> Path:
        return self.root / "plan.toml"

    @property
    def job_script(self) -> Path:
        return self.root / "job.sbatch"

    @property
    def jobs_log(self) -> Path:
        return self.root / "jobs.jsonl"

    @property
    def run_record(self) -> Path:
        return self.root / "run.json"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    def attempt_logs(self, restart: int) -> Path:
        """Per-rank logs of one attempt: logs/, then logs/restart-N/ after the Nth elastic
        restart of the processes."""
        return self.logs if restart == 0 else self.logs / f"restart-{restart}"

    def last_attempt_logs(self) -> Path:
        restart = 0
        while self.attempt_logs(restart + 1).is_dir():
            restart += 1
        return self.attempt_logs(restart)

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics"

    @property
    def traces(self) -> Path:
        return self.root / "traces"

    @property
    def report(self) -> Path:
        return self.root / "report"

    @property
    def preflight_start(self) -> Path:
        """Rank 0's start of its preflight (where, since when, and what it is doing), read by
        the ranks that wait for it to listen."""
        return self.report / "preflight-rank0.json"

    @property
    def stop_request(self) -> Path:
        """Written by a job script's signal trap (time limit soon, preemption) or by the user:
        the training processes save a checkpoint at the next step boundary and stop."""
        return self.root / "stop-requested"

    @property
    def stopped_marker(self) -> Path:
        """Written by rank 0 after the stop checkpoint is complete; tells the job script
        that requeueing will resume, not restart, the run."""
        return self.root / "stopped.json"

    @property
    def resumes(self) -> Path:
        """One JSON line per resume from a checkpoint (requeue, elastic restart, rerun)."""
        return self.root / "resumes.jsonl"

    @property
    def ranks(self) -> Path:
        """ranks/rank-N.json: each training process's heartbeat (last step, phase, pid)."""
        return self.root / "ranks"

    @property
    def stacks(self) -> Path:
        """Stack dumps: stacks/<request>/rank-N.* answers, stacks/signal/rank-N.txt (SIGUSR2)."""
        return self.root / "stacks"

    @property
    def hang_report(self) -> Path:
        """Written by the hang watchdog when it ended a hung training step."""
        return self.root / "hang.json"

    @property
    def hang_decision(self) -> Path:
        """Written with hang.json: requeue or not, and without which nodes, for the job
        script's shell (launch/watchdog/requeue.py)."""
        return self.root / "hang.env"

    @property
    def programs(self) -> Path:
        """The programs the job script runs with the job's own Python (launch/job_programs.py)."""
        return self.root / "programs"

    @property
    def rehearsal(self) -> RunFolder:
        """The run folder of this run's rehearsal (`scaletrain submit --rehearse`)."""
        return RunFolder(self.root / "rehearsal")

    @property
    def rehearsal_report(self) -> Path:
        """Written by rank 0 when a rehearsal stops: its step times, save and resume, memory."""
        return self.metrics / "rehearsal.json"

    def create(self) -> RunFolder:
        """Make the folder and the subfolders every run writes to (idempotent)."""
        for folder in (self.root, self.logs, self.metrics):
            folder.mkdir(parents=True, exist_ok=True)
        return self

    def check_can_create(self) -> None:
        """Fail now, not halfway through writing, when a file stands where a folder must be."""
        for ancestor in (self.root, *self.root.parents):
            if ancestor.exists():
                if not ancestor.is_dir():
                    raise ScaletrainError(
                        f"{ancestor} is a file, so the run folder {self.root} cannot be made.",
                        "give --runs-dir a folder (or a path where one can be made).",
                    )
                return

    @classmethod
    def from_environ(cls, environ: Mapping[str, str]) -> RunFolder | None:
        """The run folder a launcher chose for this process, if any."""
        path = environ.get(RUN_DIR, "")
        return cls(Path(path)) if path else None


def default_run_name(program: str, now: datetime) -> str:
    """`<script stem>-<YYYYmmdd-HHMMSS>`: the name of every run not named by the user, safe
    as a folder and Slurm job name."""
    stem = re.sub(r"[^A-Za-z0-9_.-]+", "-", Path(program).stem) or "run"
    return f"{stem}-{now:%Y%m%d-%H%M%S}"


def find_run(runs_dir: Path, name: str | None) -> RunFolder:
    """The run called `name` under `runs_dir`, or the newest one there when no name is given."""
    folders = [path for path in runs_dir.iterdir() if path.is_dir()] if runs_dir.is_dir() else []
    if not folders:
        raise ScaletrainError(
            f"There are no run folders in {runs_dir}/.",
            "start a run first (scaletrain run or submit), or point --runs-dir at the folder "
            "that holds your runs.",
        )
    if name is None:
        return RunFolder(max(folders, key=lambda path: path.stat().st_mtime))
    # A path such as runs/foo/ (tab completion) works as well as the bare name.
    folder = runs_dir / name if (runs_dir / name).is_dir() else Path(name)
    if not folder.is_dir():
        newest = sorted(folders, key=lambda path: path.stat().st_mtime, reverse=True)
        known = ", ".join(path.name for path in newest[:5])
        raise ScaletrainError(
            f"There is no run named {name!r} in {runs_dir}/.",
            f"use one of the runs there (newest first: {known}), or leave the name out "
            "for the newest run.",
        )
    return RunFolder(folder)
