"""Which processes on a node are this run's ranks, as the sampler finds them: real processes
shaped like a torchrun node (an agent above, DataLoader-like workers below) and like srun's
tasks; then one sample of them."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from scaletrain.core.run_folder import RunFolder
from scaletrain.core.variables import MONITOR_INTERVAL, RUN_DIR
from scaletrain.launch.sampler_process import sampler_variables
from scaletrain.observe.monitor.gpus import NoGpus
from scaletrain.observe.monitor.ranks import RankFinder
from scaletrain.observe.monitor.sampler import (
    DEFAULT_INTERVAL_S,
    ProcessCpu,
    interval_from,
    take_sample,
)
from tests.conftest import clean_environ

SLEEP = "import time; time.sleep(120)"
# A rank that starts a worker of its own (as DataLoader does): the worker inherits RANK.
RANK = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {SLEEP!r}]); {SLEEP}"
# torchrun's agent: started by srun (SLURM_PROCID of its task), it starts ranks 0 and 1.
AGENT = (
    "import os, subprocess, sys, time\n"
    f"for rank in (0, 1): subprocess.Popen([sys.executable, '-c', {RANK!r}],"
    " env={**os.environ, 'RANK': str(rank)})\n"
    "time.sleep(120)\n"
)
WAIT_S = 60.0


@pytest.fixture
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes the test starts, each in a session of its own, ended with all they started."""
    processes: list[subprocess.Popen[bytes]] = []
    yield processes
    for process in processes:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def start(started: list[subprocess.Popen[bytes]], code: str, **environ: str) -> int:
    process = subprocess.Popen(
        [sys.executable, "-c", code], env=clean_environ(**environ), start_new_session=True
    )
    started.append(process)
    return process.pid


def ranks_found(run: Path, count: int) -> dict[int, psutil.Process]:
    """What RankFinder finds once `count` ranks and their workers have started."""
    deadline = time.monotonic() + WAIT_S
    while True:
        found = RankFinder(str(run)).find()
        workers = sum(len(process.children()) for process in found.values())
        if (len(found) == count and workers == count) or time.monotonic() > deadline:
            return found
        time.sleep(0.2)


def test_the_ranks_under_torchrun_not_its_agent_nor_their_workers(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    run, other = tmp_path / "run", tmp_path / "other"
    agent = start(started, AGENT, **{RUN_DIR: str(run), "SLURM_PROCID": "0", "SLURM_STEP_ID": "0"})
    start(started, SLEEP, **{RUN_DIR: str(other), "RANK": "0"})  # another run's rank 0
    found = ranks_found(run, 2)
    assert sorted(found) == [0, 1]
    for rank, process in found.items():
        assert process.parent().pid == agent
        assert process.environ()["RANK"] == str(rank)
    # One sample of this node: both ranks, their memory, no GPU on this machine.
    sample = take_sample("n1", RankFinder(str(run)), ProcessCpu(), NoGpus())
    assert [(r.rank, r.pid, r.gpu_index) for r in sample.ranks] == [
        (rank, process.pid, None) for rank, process in sorted(found.items())
    ]
    assert all(r.rss_bytes > 0 and r.cpu_percent >= 0 for r in sample.ranks)
    assert sample.host == "n1" and sample.gpus == () and sample.memory_total_bytes > 0


def test_srun_tasks_are_ranks_by_their_procid(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    task = {RUN_DIR: str(tmp_path), "SLURM_STEP_ID": "0"}
    for procid in ("1", "0"):
        start(started, RANK, **task, SLURM_PROCID=procid)
    # The batch script's own Python (no job step) is not a task.
    start(started, SLEEP, **{RUN_DIR: str(tmp_path), "SLURM_PROCID": "0"})
    assert sorted(ranks_found(tmp_path, 2)) == [0, 1]


def test_what_the_sampler_reads_from_its_environment(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "runs" / "mnist")
    variables = sampler_variables(folder, 0.5)
    assert variables == {RUN_DIR: str(folder.root.resolve()), MONITOR_INTERVAL: "0.5"}
    assert interval_from(variables) == 0.5
    for unusable in ("", "two", "0", "-1"):
        assert interval_from({MONITOR_INTERVAL: unusable}) == DEFAULT_INTERVAL_S
