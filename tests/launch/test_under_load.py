"""A loaded node does not fail a healthy job: with every core of this machine busy with other
work, the README's job and unconverted scripts in every launch mode pass their preflight with
its own waiting limits and train; `status` and `logs -f` follow them and the hang watchdog
ends nothing. One round here; benchmarks/jobs_under_load.py runs ten and keeps the count.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import end_session, start_scaletrain
from tests.support.load import (
    LOADED_JOB_TIMEOUT_S,
    cpu_hogs,
    loaded_environ,
    status_while_running,
    submit_round,
    wait_round,
)
from tests.support.slurm_cluster import SlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.multiprocess, pytest.mark.long]


def test_every_mode_passes_its_preflight_and_trains_with_every_core_busy(
    slurm_cluster: SlurmCluster, tmp_path: Path, mnist_data: Path
) -> None:
    environ = loaded_environ(slurm_cluster, tmp_path)
    with cpu_hogs(seconds=LOADED_JOB_TIMEOUT_S):
        jobs = submit_round(slurm_cluster, tmp_path, mnist_data, "loaded")
        follow = start_scaletrain(
            "logs", "-f", "loaded-torchrun", cwd=tmp_path, log=tmp_path / "follow.log",
            environ=environ,
        )  # fmt: skip
        running = status_while_running(tmp_path, environ, "loaded-srun")
        ended = wait_round(slurm_cluster, jobs)
        followed = end_session(follow, timeout=LOADED_JOB_TIMEOUT_S)
    for job in ended:
        assert (job.state, job.preflight_passed) == ("COMPLETED", True), (job.mode, job.output)
        assert not (job.folder.hang_report).exists(), job.output  # the watchdog ended nothing
        assert "Traceback" not in job.output, (job.mode, job.output)
    assert running.get("state") in ("RUNNING", "COMPLETED"), running
    log = (tmp_path / "follow.log").read_text()
    assert followed == 0, log[-3000:]
    assert "test_accuracy" in log  # rank 0's last line of the README's job, followed live
