"""`scaletrain logs`: print or follow the output of a run's newest launch: its Slurm job's
output file, or rank 0's output of a `scaletrain run`."""

from __future__ import annotations

from pathlib import Path

import typer

from scaletrain.cli.common import RUN_ARGUMENT, RUNS_DIR_OPTION, newest_launch, process_environ
from scaletrain.core import console
from scaletrain.core.errors import ScaletrainError
from scaletrain.core.files import read_text
from scaletrain.core.progress_line import format_duration
from scaletrain.core.rank_files import read_beats, since_last_step
from scaletrain.core.run_folder import RunFolder
from scaletrain.core.run_record import RunRecord, read_run_record
from scaletrain.launch.local_status import follow_local_output, local_state, rank0_output
from scaletrain.slurm import commands as slurm
from scaletrain.slurm.follow import follow_job_output
from scaletrain.slurm.history import job_output_file
from scaletrain.slurm.output import JobInfo

# A running job silent for this long (no output and no finished step) gets a notice.
SILENCE_NOTICE_S = 60


def logs(
    run_name: str | None = RUN_ARGUMENT,
    runs_dir: Path = RUNS_DIR_OPTION,
    follow: bool = typer.Option(
        False, "--follow", "-f", help="Keep printing new output until the job or run ends."
    ),
    notice_after: float = typer.Option(
        SILENCE_NOTICE_S,
        "--notice-after",
        help="With -f: say so when a running job has neither printed nor finished a step "
        "for this many seconds (and again each time the silence doubles).",
    ),
) -> None:
    """Print the output of a run: its Slurm job's, or rank 0's of a `scaletrain run`.

    A Slurm job's output file is logs/<job name>-<job id>.out; a local run's rank 0 wrote
    logs/rank-0.out (printed on stdout) and logs/rank-0.err (printed on stderr).

    Example: [bold]scaletrain logs -f[/bold] follows the newest run until it ends.
    """
    folder, _, launch = newest_launch(runs_dir, run_name)
    if isinstance(launch, RunRecord):
        _local_logs(folder, launch, follow=follow)
        return
    environ = process_environ()
    rehearsal = launch.details.get("rehearsal")
    if rehearsal and job_output_file(folder, launch.job_id) is None:
        # The job waits for its rehearsal, or was cancelled when it failed: show that first.
        console.info(
            f"job {launch.job_id} has no output: it runs only after its rehearsal, job "
            f"{rehearsal}, passed. The rehearsal's output:"
        )
        of_run = f"the rehearsal of run {folder.name}"
        _job_logs(folder.rehearsal, str(rehearsal), of_run, environ, follow, notice_after)
        if not follow:
            return
    _job_logs(folder, launch.job_id, f"run {folder.name}", environ, follow, notice_after)


def _job_logs(
    folder: RunFolder,
    job_id: str,
    of_run: str,
    environ: dict[str, str],
    follow: bool,
    notice_after: float,
) -> None:
    """Print the output file of job `job_id` of `of_run`; with `follow`, until the job ends."""
    if follow:
        final = follow_job_output(
            folder,
            job_id,
            environ=environ,
            write=console.show_text,
            on_waiting=_show_waiting,
            on_quiet=_SilenceNotice(folder, notice_after),
            on_slow=_show_slow,
            on_answer_again=lambda: console.info("Slurm answers again"),
        )
        state = final.state_with_reason if final else "no longer known to Slurm"
        console.info(f"job {job_id} of {of_run}: {state}")
        return
    output_file = job_output_file(folder, job_id)
    if output_file is None:
        info = slurm.job_info(job_id, environ=environ)
        state = info.state_with_reason if info else "no longer known to Slurm"
        raise ScaletrainError(
            f"Job {job_id} of {of_run} has no output file in {folder.logs}/ (state: {state}).",
            "a waiting job writes nothing yet; `scaletrain logs -f` prints its output once it "
            "starts. A job submitted without --output=logs/%x-%j.out writes elsewhere.",
        )
    console.show_text(read_text(output_file, "job output", errors="replace"))


def _local_logs(folder: RunFolder, record: RunRecord, *, follow: bool) -> None:
    """Rank 0's stdout on stdout and its stderr on stderr; with `follow`, until the launch
    ends. The other ranks' logs lie beside them."""
    if follow:
        follow_local_output(
            folder,
            record,
            write=console.show_text,
            write_error=lambda text: console.show_text(text, stderr=True),
        )
        state, _ = local_state(folder, read_run_record(folder) or record)  # rewritten at its end
        console.info(f"run {folder.name}: {state}")
        return
    shown = [path for path in rank0_output(folder) if path.is_file()]
    if not shown:
        state, _ = local_state(folder, record)
        raise ScaletrainError(
            f"Run {folder.name!r} has no output of rank 0 in {folder.last_attempt_logs()}/ "
            f"(state: {state}).",
            "its processes write there once they start; `scaletrain logs -f` waits for them.",
        )
    for path in shown:
        text = read_text(path, "rank 0's output", errors="replace")
        console.show_text(text, stderr=path.suffix == ".err")


class _SilenceNotice:
    """Says when a running job has been silent (no output, no step) for `after_s`, and again
    each time the silence doubles."""

    def __init__(self, folder: RunFolder, after_s: float) -> None:
        self._folder = folder
        self._after_s = self._next_s = after_s

    def __call__(self, quiet_s: float) -> None:
        beats = read_beats(self._folder)
        since_step = since_last_step(beats)
        silent = min(quiet_s, since_step) if since_step is not None else quiet_s
        if silent < self._after_s:
            self._next_s = self._after_s
            return
        if silent < self._next_s:
            return
        self._next_s = 2 * silent
        step = max((beat.step for beat in beats.values()), default=0)
        last = (
            f"; the last step ({step}) {format_duration(since_step)} ago"
            if since_step is not None
            else " and no step yet"
        )
        console.warning(
            f"no output for {format_duration(quiet_s)}{last}. "
            f"`scaletrain stacks {self._folder.name}` shows where each rank is."
        )


def _show_slow(why: str) -> None:
    console.warning(f"Slurm slow, still following: {why} (Ctrl-C stops following, not the job)")


def _show_waiting(info: JobInfo) -> None:
    console.info(f"job {info.job_id} is {info.state_with_reason}: waiting for its output")
