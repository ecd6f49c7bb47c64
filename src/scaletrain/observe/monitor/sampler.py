"""The per-node sampler: `python -m scaletrain.observe.monitor.sampler`, started beside training.

Every interval it appends one `Sample` (GPUs, node CPU and memory, each training process
of this run on this node) to metrics/monitor-<host>.jsonl, and the same numbers to
TensorBoard event files where tensorboard is installed. It ends on SIGTERM/SIGINT, or when
the process that started it is gone (in a job: the launcher of the node's first task).

Generated jobs start it in each node's first task; `scaletrain run` starts it beside
torchrun. It imports no torch, and sleeps between samples: one sample costs a few ms of CPU.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import sys
import time
from pathlib import Path
from types import FrameType

import psutil

from scaletrain.core.run_folder import RunFolder
from scaletrain.core.variables import MONITOR_INTERVAL, RUN_DIR
from scaletrain.observe.monitor.gpus import GpuReader, open_gpu_reader
from scaletrain.observe.monitor.ranks import RankFinder
from scaletrain.observe.monitor.samples import RankSample, Sample, monitor_file
from scaletrain.observe.monitor.tensorboard_events import TensorBoardWriter, tensorboard_available

DEFAULT_INTERVAL_S = 2.0
_NICENESS = 10


class _StopRequested(Exception):  # noqa: N818 - a request, not an error
    pass


def _stop(_signum: int, _frame: FrameType | None) -> None:
    raise _StopRequested


class ProcessCpu:
    """CPU % of a process with its children (DataLoader workers) since the previous sample;
    a process seen for the first time is measured from its start."""

    def __init__(self) -> None:
        self._previous: dict[tuple[int, float], tuple[float, float]] = {}

    def percent(self, process: psutil.Process) -> float:
        now = time.time()
        family = [process]
        with contextlib.suppress(psutil.Error):
            family += process.children(recursive=True)
        busy = 0.0
        for member in family:
            try:
                with member.oneshot():
                    started = member.create_time()
                    times = member.cpu_times()
            except psutil.Error:
                continue
            used = times.user + times.system
            key = (member.pid, started)
            since, before = self._previous.get(key, (started, 0.0))
            self._previous[key] = (now, used)
            busy += (used - before) / max(now - since, 1e-3)
        return 100 * busy


def take_sample(host: str, finder: RankFinder, cpu: ProcessCpu, gpu_reader: GpuReader) -> Sample:
    """One sample of this node now."""
    gpus = gpu_reader.read()
    gpu_of_pid = {pid: gpu.index for gpu in gpus for pid in gpu.pids}
    ranks = []
    for rank, process in finder.find().items():
        try:
            rss = process.memory_info().rss
        except psutil.Error:
            continue
        ranks.append(
            RankSample(
                rank=rank,
                pid=process.pid,
                cpu_percent=round(cpu.percent(process), 1),
                rss_bytes=rss,
                gpu_index=gpu_of_pid.get(process.pid),
            )
        )
    memory = psutil.virtual_memory()
    return Sample(
        time=round(time.time(), 3),
        host=host,
        cpu_percent=psutil.cpu_percent(None),
        memory_used_bytes=memory.total - memory.available,
        memory_total_bytes=memory.total,
        gpus=gpus,
        ranks=tuple(ranks),
    )


def run_sampler(folder: RunFolder, interval_s: float, *, host: str, watch_pid: int) -> None:
    """Sample until stopped or until `watch_pid` is gone."""
    folder.metrics.mkdir(parents=True, exist_ok=True)
    finder = RankFinder(str(folder.root))
    cpu = ProcessCpu()
    gpu_reader = open_gpu_reader()
    board = None
    if tensorboard_available():
        board = TensorBoardWriter(folder.metrics / "tensorboard" / host)
    psutil.cpu_percent(None)  # the first call only starts the measurement
    try:
        with monitor_file(folder.metrics, host).open("a", encoding="utf-8") as output:
            while psutil.pid_exists(watch_pid):
                time.sleep(interval_s)
                sample = take_sample(host, finder, cpu, gpu_reader)
                output.write(sample.to_json() + "\n")
                output.flush()
                if board is not None:
                    board.add(sample)
    except _StopRequested:
        pass
    finally:
        gpu_reader.close()
        if board is not None:
            board.close()


def interval_from(environ: dict[str, str]) -> float:
    text = environ.get(MONITOR_INTERVAL, "")
    try:
        value = float(text)
    except ValueError:
        return DEFAULT_INTERVAL_S
    return value if value > 0 else DEFAULT_INTERVAL_S


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run-dir", type=Path, default=None, help=f"default: ${RUN_DIR}")
    parser.add_argument("--interval", type=float, default=None, help="seconds between samples")
    parser.add_argument(
        "--watch", type=int, default=os.getppid(), help="end when this process ends (a pid)"
    )
    options = parser.parse_args(argv)
    environ = dict(os.environ)
    folder = RunFolder(options.run_dir) if options.run_dir else RunFolder.from_environ(environ)
    if folder is None:
        sys.exit(f"scaletrain sampler: no run folder (--run-dir or {RUN_DIR})")
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, _stop)
    # Training comes first: where cores are scarce (its start-up, a CPU run) the sampler waits.
    os.nice(_NICENESS)
    if options.watch <= 1 or not psutil.pid_exists(options.watch):
        return  # what it should watch has ended already (or it would watch init forever)
    interval = options.interval or interval_from(environ)
    run_sampler(folder, interval, host=socket.gethostname(), watch_pid=options.watch)


if __name__ == "__main__":
    main(sys.argv[1:])
