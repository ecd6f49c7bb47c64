"""The runtime under a real 2-node Slurm: srun per task, srun + torchrun, and the batch-shell
mistake, each as a hand-written sbatch script (tests/fixtures/slurm/)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.conftest import SLURM_SCRIPTS, WORKERS
from tests.support.slurm_cluster import SlurmCluster

pytestmark = [pytest.mark.slurm, pytest.mark.multiprocess]


def submit_fixture(cluster: SlurmCluster, script: str, folder: Path) -> tuple[str, str]:
    """Submit tests/fixtures/slurm/<script> from `folder`; (final state, job output)."""
    environ = {"PYTHON": sys.executable, "WORKERS": str(WORKERS), "OUT": str(folder)}
    submitted = cluster.run(
        ["sbatch", "--parsable", str(SLURM_SCRIPTS / script)], env=environ, cwd=folder
    )
    assert submitted.returncode == 0, submitted.stderr
    job_id = submitted.stdout.strip()
    state = cluster.wait_for_job(job_id)
    output = next(folder.glob(f"*-{job_id}.out")).read_text()
    return state, output


def rank_results(folder: Path) -> list[dict]:
    return [json.loads((folder / f"rank{rank}.json").read_text()) for rank in range(4)]


def test_nodes_look_like_separate_hosts(slurm_cluster: SlurmCluster) -> None:
    # One task per node prints its hostname, its hsn0 address and where n1 resolves to.
    probe = (
        "echo $(hostname) $(ip -o -4 addr show dev hsn0 | awk '{print $4}') "
        "$(getent hosts n1 | cut -d' ' -f1)"
    )
    result = slurm_cluster.run(["srun", "--nodes=2", "--ntasks-per-node=1", "sh", "-c", probe])
    assert result.returncode == 0, result.stderr
    addresses = slurm_cluster.network.addresses
    assert sorted(result.stdout.splitlines()) == [
        f"n1 {addresses['n1']}/24 {addresses['n1']}",
        f"n2 {addresses['n2']}/24 {addresses['n1']}",
    ]
    assert (
        "n1" not in Path("/etc/hosts").read_text(encoding="utf-8").split()
    )  # the machine's file is untouched


def test_srun_per_task_on_two_nodes(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    state, output = submit_fixture(slurm_cluster, "collectives-srun.sbatch", tmp_path)
    assert state == "COMPLETED", output
    assert "nodes n[1-2]" in output
    ranks = rank_results(tmp_path)
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    assert [r["local_rank"] for r in ranks] == [0, 1, 0, 1]
    assert [r["node_rank"] for r in ranks] == [0, 0, 1, 1]
    assert [r["hostname"] for r in ranks] == ["n1", "n1", "n2", "n2"]
    for result in ranks:
        assert result["launcher"] == "slurm"
        assert (result["world_size"], result["num_nodes"]) == (4, 2)
        assert result["master_addr"] == "n1"  # the first host of the node list
        assert result["total_of_rank_plus_one"] == 10.0  # 1+2+3+4: all four ranks reduced


def test_srun_torchrun_with_c10d_rendezvous_on_two_nodes(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    state, output = submit_fixture(slurm_cluster, "collectives-torchrun.sbatch", tmp_path)
    assert state == "COMPLETED", output
    ranks = rank_results(tmp_path)
    assert [r["rank"] for r in ranks] == [0, 1, 2, 3]
    assert [r["local_rank"] for r in ranks] == [0, 1, 0, 1]
    for result in ranks:
        assert result["launcher"] == "torchrun"
        assert (result["world_size"], result["num_nodes"]) == (4, 2)
        assert result["total_of_rank_plus_one"] == 10.0
    # torchrun numbers the nodes in rendezvous order: each node holds one node rank, 2 ranks.
    by_host = {
        r["hostname"]: {x["node_rank"] for x in ranks if x["hostname"] == r["hostname"]}
        for r in ranks
    }
    assert sorted(by_host) == ["n1", "n2"]
    assert sorted(node for nodes in by_host.values() for node in nodes) == [0, 1]


def test_python_in_the_batch_shell_of_a_multi_task_job_fails_fast(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    state, output = submit_fixture(slurm_cluster, "python-without-srun.sbatch", tmp_path)
    assert state == "FAILED"
    assert "asked for 4 tasks" in output
    assert "HINT: start the script with `srun python train.py`" in output
