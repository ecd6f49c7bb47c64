"""Generated jobs on a loaded machine: every core busy with other work, as on a busy login
node or a shared compute node, while the test Slurm runs the README's job and unconverted
scripts in every launch mode. Used by tests/launch/test_under_load.py (one round) and
benchmarks/jobs_under_load.py (many rounds, results to a file).
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from scaletrain.core.run_folder import RunFolder
from tests.conftest import WORKERS, scaletrain
from tests.support.slurm_cluster import SlurmCluster
from tests.support.slurm_jobs import EXAMPLE, job_environ, submit, submit_options

# A job on the loaded machine starts, passes its preflight and trains within this.
LOADED_JOB_TIMEOUT_S = 900
# Burns one core until killed, or for this long at most.
_HOG = "import time\nend = time.monotonic() + {seconds}\nwhile time.monotonic() < end: pass\n"


@contextlib.contextmanager
def cpu_hogs(seconds: float, count: int | None = None) -> Iterator[list[subprocess.Popen[bytes]]]:
    """One process spinning on each core (or `count`), ended when the block ends."""
    hogs = [
        subprocess.Popen([sys.executable, "-c", _HOG.format(seconds=seconds)])
        for _ in range(count or os.cpu_count() or 2)
    ]
    try:
        yield hogs
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait(timeout=30)


@dataclass(frozen=True, slots=True)
class LoadedJob:
    """One job of a round: what it ran, and how it ended."""

    mode: str
    folder: RunFolder
    job_id: str
    state: str = ""
    preflight_passed: bool | None = None
    output: str = ""


def deepspeed_config(folder: Path) -> Path:
    config = folder / "ds_config.json"
    config.write_text(
        json.dumps(
            {
                "train_micro_batch_size_per_gpu": 8,
                "optimizer": {"type": "SGD", "params": {"lr": 0.1}},
            }
        )
    )
    return config


def commands(folder: Path, mnist_data: Path) -> dict[str, tuple[str, ...]]:
    """Per launch mode, what its users bring: the README's MNIST job under torchrun, and
    unconverted scripts written for each other launcher."""
    return {
        "torchrun": (str(EXAMPLE), "--data-dir", str(mnist_data), "--epochs", "1"),
        "srun": (str(WORKERS / "unconverted_ddp.py"),),
        "accelerate": (str(WORKERS / "accelerate_ranks.py"),),
        "deepspeed": (
            str(WORKERS / "deepspeed_ranks.py"),
            "--deepspeed",
            "--deepspeed_config",
            str(deepspeed_config(folder)),
        ),
        "lightning": (str(WORKERS / "lightning_ranks.py"), "--", "--devices", "1", "--nodes", "2"),
    }


def loaded_environ(cluster: SlurmCluster, folder: Path) -> dict[str, str]:
    """A user's shell on the test cluster, with the preflight's own waiting limits: nothing
    raised for this machine's load."""
    environ = job_environ(cluster, folder, PROBE_DIR=str(folder / "probe"))
    environ.pop("SCALETRAIN_RENDEZVOUS_TIMEOUT", None)
    (folder / "probe").mkdir(exist_ok=True)
    return environ


def submit_round(
    cluster: SlurmCluster, folder: Path, mnist_data: Path, prefix: str
) -> list[LoadedJob]:
    """Submit one job per launch mode, 2 nodes × 1 process, all at once."""
    environ = loaded_environ(cluster, folder)
    jobs = []
    for mode, command in commands(folder, mnist_data).items():
        options = submit_options(f"{prefix}-{mode}", mode, 2, 1)
        run, job_id = submit(cluster, folder, environ, options, *command)
        jobs.append(LoadedJob(mode=mode, folder=run, job_id=job_id))
    return jobs


def wait_round(cluster: SlurmCluster, jobs: list[LoadedJob]) -> list[LoadedJob]:
    """Each job when it has ended: its state, its preflight's verdict, its output."""
    ended = []
    for job in jobs:
        state = cluster.wait_for_job(job.job_id, timeout=LOADED_JOB_TIMEOUT_S)
        output = job.folder.logs / f"{job.folder.name}-{job.job_id}.out"
        preflight = job.folder.report / "preflight.json"
        passed = json.loads(preflight.read_text())["passed"] if preflight.is_file() else None
        ended.append(
            LoadedJob(
                mode=job.mode,
                folder=job.folder,
                job_id=job.job_id,
                state=state,
                preflight_passed=passed,
                output=output.read_text() if output.is_file() else "",
            )
        )
    return ended


def status_while_running(folder: Path, environ: dict[str, str], run: str) -> dict[str, object]:
    """`scaletrain status --json RUN` once the job runs (or has ended)."""
    deadline = time.monotonic() + LOADED_JOB_TIMEOUT_S
    while True:
        shown = scaletrain("status", "--json", run, cwd=folder, environ=environ)
        fields: dict[str, object] = json.loads(shown.stdout) if shown.returncode == 0 else {}
        if fields.get("state") not in (None, "PENDING") or time.monotonic() > deadline:
            return fields
        time.sleep(2)
