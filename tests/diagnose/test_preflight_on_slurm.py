"""The preflight step of generated jobs on the real 2-node Slurm, set up to fail: the job must
stop within seconds, say what is wrong and how to fix it, and never start training."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scaletrain.core.run_folder import RunFolder
from tests.support.slurm_cluster import SlurmCluster
from tests.support.slurm_jobs import (
    EXAMPLE,
    JOB_TIMEOUT_S,
    job_environ,
    submit,
    submit_options,
)

pytestmark = [pytest.mark.slurm, pytest.mark.multiprocess]


def failed_before_training(cluster: SlurmCluster, folder: RunFolder, job_id: str) -> str:
    """Wait for the job; it must have failed in the preflight step. Its output."""
    state = cluster.wait_for_job(job_id, timeout=JOB_TIMEOUT_S)
    output = (folder.logs / f"{folder.name}-{job_id}.out").read_text()
    assert state == "FAILED", f"{state}\n{output}"
    assert "the preflight check failed (see above); training was not started" in output
    assert not (folder.metrics / "train.jsonl").exists(), output
    return output


@pytest.mark.parametrize(
    ("variable", "value", "finding", "fix"),
    [
        # A Puhti/Mahti InfiniBand setting copied to a site whose nodes have other interfaces.
        (
            "GLOO_SOCKET_IFNAME",
            "ib0",
            "gloo-socket-ifname: FAIL GLOO_SOCKET_IFNAME=ib0 matches no interface of n1",
            "(it has lo, hsn0)",  # the finding names the interfaces the node does have
        ),
        # Every task sees the same single device: two ranks of a node would share one GPU.
        (
            "CUDA_VISIBLE_DEVICES",
            "0",
            "FAIL gpu-per-rank",
            "give each rank its own GPU",
        ),
    ],
)
def test_a_broken_setup_stops_the_job_before_training(
    slurm_cluster: SlurmCluster, tmp_path: Path, variable: str, value: str, finding: str, fix: str
) -> None:
    environ = job_environ(slurm_cluster, tmp_path, **{variable: value})
    options = submit_options(f"broken-{variable.lower()}", "srun", 2, 2)
    folder, job_id = submit(
        slurm_cluster, tmp_path, environ, options, str(EXAMPLE), "--epochs", "1"
    )
    output = failed_before_training(slurm_cluster, folder, job_id)
    assert finding in output and fix in output, output
    report = folder.report / "preflight.json"
    if report.is_file():  # written when the group formed and rank 0 gathered every rank
        assert json.loads(report.read_text())["passed"] is False
