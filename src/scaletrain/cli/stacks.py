"""`scaletrain stacks`: where every rank of a running run is now, and who the others wait for.

Every training process dumps its Python stacks on SIGUSR2 (faulthandler, from C: it works
while the process is stuck inside a collective). For a Slurm job the signal reaches every
node through one `srun --overlap` step; for `scaletrain run` it is sent here. The processes'
heartbeat threads also answer a request file with the flight recorder and their network.
"""

from __future__ import annotations

import os
import signal
from collections import defaultdict
from pathlib import Path

import typer

from scaletrain.cli.common import RUN_ARGUMENT, RUNS_DIR_OPTION, process_environ
from scaletrain.core import console
from scaletrain.core.errors import ScaletrainError
from scaletrain.core.progress_line import format_duration
from scaletrain.core.rank_files import (
    RankBeat,
    read_beats,
    runs_here,
    seconds_since,
    signal_dump_path,
)
from scaletrain.core.run_folder import RunFolder, find_run
from scaletrain.launch.watchdog.collect import Collected, collect_stacks
from scaletrain.launch.watchdog.stack_text import threads
from scaletrain.launch.watchdog.verdict import judge
from scaletrain.slurm import commands as slurm
from scaletrain.slurm.history import current_job, read_job_events

# A heartbeat thread answers within its interval (at most 10 s); twice that, and a margin.
_ANSWER_WAIT_S = 25.0


def stacks(
    run_name: str | None = RUN_ARGUMENT,
    runs_dir: Path = RUNS_DIR_OPTION,
    full: bool = typer.Option(False, "--full", help="Print every rank's main-thread stack."),
    wait: float = typer.Option(
        _ANSWER_WAIT_S, "--wait", help="Seconds to wait for the ranks' answers."
    ),
) -> None:
    """Show where every rank of a running run is: its last step, its Python stack, who is behind.

    Example: [bold]scaletrain stacks mnist[/bold] while the job seems stuck
    """
    folder = find_run(runs_dir, run_name)
    beats = {rank: beat for rank, beat in read_beats(folder).items() if beat.phase != "ended"}
    if not beats:
        raise ScaletrainError(
            f"Run {folder.name!r} has no running training process ({folder.ranks}/ has no "
            "heartbeat of one).",
            "the run ended, has not reached st.init() yet, or runs with --hang-limit 0 "
            "(no heartbeats); `scaletrain status` shows its state.",
        )
    offsets = {rank: _size(signal_dump_path(folder, rank)) for rank in beats}
    _send_signal(folder, beats)
    collected = collect_stacks(folder, "scaletrain stacks", wait_s=wait, signal_offsets=offsets)
    _show(collected, full)


def _size(path: Path) -> int:
    return path.stat().st_size if path.is_file() else 0


def _send_signal(folder: RunFolder, beats: dict[int, RankBeat]) -> None:
    """SIGUSR2 to every training process: through srun on a Slurm job's nodes, else here."""
    environ = process_environ()
    job = current_job(read_job_events(folder))
    info = slurm.job_info(job.job_id, environ=environ) if job else None
    if job is not None and info is not None and info.state == "RUNNING":
        by_node: dict[str, list[tuple[int, int]]] = defaultdict(list)
        for beat in beats.values():
            by_node[beat.host].append((beat.pid, beat.pid_start))
        try:
            slurm.signal_processes(job.job_id, by_node, "USR2", environ=environ)
        except ScaletrainError as failure:
            # srun failed or did not answer (a node unreachable): the heartbeat threads still
            # answer the request file, without the signal.
            console.warning(f"{failure.problem} The ranks' own answers follow.")
        return
    for beat in beats.values():
        if runs_here(beat):
            os.kill(beat.pid, signal.SIGUSR2)


def _show(collected: Collected, full: bool) -> None:
    rows: list[tuple[console.Piece, ...]] = []
    for rank in collected.ranks.values():
        beat = rank.beat
        ago = (
            format_duration(seconds_since(beat.last_step_time)) + " ago"
            if beat and beat.last_step_time
            else "-"
        )
        where: console.Piece
        if rank.main is None:
            where = ("no stack: no answer, no SIGUSR2 dump", "warning")
        elif rank.main.waiting:
            where = f"waiting in a collective, at {rank.main.where}"
        else:
            where = (f"busy, at {rank.main.where}", "warning")
        step = str(beat.step) if beat else "-"
        rows.append((str(rank.rank), rank.host, step, ago, where))
    columns = ("rank", "node", "step", "last step", "main thread")
    console.show(console.table(rows, columns=columns, show_edge=False, pad_edge=False, box=None))
    verdict = judge(collected)
    if verdict.stopped_first:
        console.warning(f"the others wait for: {verdict.summary}")
    else:
        console.info(verdict.summary)
    if full:
        for rank in collected.ranks.values():
            frames = threads(rank.stacks).get(rank.beat.main_thread, []) if rank.beat else []
            lines = [f"rank {rank.rank} on {rank.host}, main thread:"]
            lines += [f"  {frame.path}:{frame.line} in {frame.function}" for frame in frames]
            console.show_text("\n".join(lines) + "\n")
    console.info(f"stacks of every thread: {collected.folder}/")
