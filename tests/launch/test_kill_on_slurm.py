"""`kill -9` of one training rank of a generated 2-node job on the real test Slurm: the job
ends as the docs promise (torchrun restarts the group, which resumes and completes; in srun
mode the job fails), and nothing of the job is left on any node afterwards: no rank, no
DataLoader worker, forkserver or resource tracker, no sampler or watchdog.

The test cluster tracks a step's processes by their parents (proctrack/linuxproc), as sites
without cgroups do: a process whose parent was killed escapes Slurm's own clean-up, so what
the job leaves is what scaletrain leaves."""

from __future__ import annotations

import json
import os
import signal
from pathlib import Path

import pytest

from scaletrain.core.rank_files import read_beats
from tests.conftest import WORKERS
from tests.support.run_processes import left_after, parent_of, run_processes
from tests.support.slurm_cluster import SlurmCluster
from tests.support.slurm_jobs import JOB_TIMEOUT_S, finished, job_environ, submit, submit_options
from tests.support.waiting import wait_until

# The resumable worker itself: `submit` reads its st.Checkpointer, so the run resumes.
RESUMABLE = WORKERS / "resumable.py"

pytestmark = [pytest.mark.slurm, pytest.mark.multiprocess]

# Processes need a moment to see their parent gone; after this, what is left is left over.
GRACE_S = 15


@pytest.mark.parametrize("mode", ["torchrun", "srun"])
def test_a_killed_rank_ends_as_promised_and_leaves_nothing_on_any_node(
    slurm_cluster: SlurmCluster, tmp_path: Path, mode: str
) -> None:
    environ = job_environ(slurm_cluster, tmp_path)
    name = f"killed-{mode}"
    # One DataLoader worker per rank; paced at 50 ms per step, a checkpoint every 10 steps.
    args = (str(RESUMABLE), "--out", f"runs/{name}/out", "--workers", "1",
            "--step-seconds", "0.05", "--every-steps", "10", "--epochs", "8")  # fmt: skip
    options = submit_options(name, mode, 2, 1, "--no-check")
    folder, job_id = submit(slurm_cluster, tmp_path, environ, options, *args)

    def training_past_a_checkpoint() -> bool:
        beats = read_beats(folder)
        return len(beats) == 2 and (folder.checkpoints / "LATEST").is_file()

    wait_until(training_past_a_checkpoint, "both ranks to train past a checkpoint", slurm_cluster)
    killed = read_beats(folder)[1]
    running = run_processes(folder.root)
    # What the kill would leave behind if nothing ended it: the rank's forkserver, its
    # DataLoader worker (a child of the forkserver) and its resource tracker.
    started_by_rank = [pid for pid in running if parent_of(pid) == killed.pid]
    assert killed.pid in running and len(started_by_rank) >= 2, running
    # The job's own helpers are counted too: each node's sampler, the watchdog.
    commands = " ".join(running.values())
    assert "scaletrain.observe.monitor.sampler" in commands, running
    assert "scaletrain.launch.watchdog" in commands, running
    os.kill(killed.pid, signal.SIGKILL)

    if mode == "torchrun":
        # torchrun restarts both ranks (--max-restarts 3), which resume and finish.
        output = finished(slurm_cluster, folder, job_id)
        resumes = [json.loads(line) for line in folder.resumes.read_text().splitlines()]
        # Rank 0 writes the record; its node's torchrun counts the other's restart as a
        # change of members, not a restart of its own: the count there stays 0.
        assert len(resumes) == 1 and resumes[0]["step"] >= 10, output
        assert f"resumed from {folder.checkpoints}" in output
        assert read_beats(folder)[1].pid != killed.pid  # a new rank 1 finished the run
    else:
        # One task failed: srun ends the others (--kill-on-bad-exit), the job fails.
        assert slurm_cluster.wait_for_job(job_id, timeout=JOB_TIMEOUT_S) == "FAILED"
        output = (folder.logs / f"{name}-{job_id}.out").read_text()
    left = left_after(lambda: run_processes(folder.root), GRACE_S)
    assert left == {}, f"left running after job {job_id} ended: {left}\n{output[-3000:]}"
