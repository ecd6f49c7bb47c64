"""`scaletrain check` and the in-job preflight with real processes on gloo: a healthy run,
and setups that must fail with the problem and its fix."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import PROCESS_TIMEOUT_S, clean_environ, scaletrain, torchrun
from tests.diagnose.conftest import PREFLIGHT, run_ranks, shown

pytestmark = pytest.mark.multiprocess


def test_healthy_two_rank_check_passes_and_records_every_rank(tmp_path: Path) -> None:
    result = scaletrain(
        "check", "--nproc", "2", "--name", "ok", "--verbose", "--json", cwd=tmp_path
    )
    assert result.returncode == 0, shown(result)
    assert "preflight passed" in result.stderr  # with --json, stdout holds the report alone
    record = json.loads(result.stdout)
    assert record == json.loads((tmp_path / "runs/ok/report/preflight.json").read_text())
    assert record["passed"] is True
    assert [rank["facts"]["rank"] for rank in record["ranks"]] == [0, 1]
    for rank in record["ranks"]:
        statuses = {check["name"]: check["status"] for check in rank["results"]}
        assert statuses["launcher"] == statuses["all-reduce"] == "ok"
        assert statuses["shared-folder"] == statuses["run-folder"] == "ok"
        assert rank["facts"]["launcher"] == "torchrun"
    assert "sum over 2 ranks correct (3)" in shown(result)  # --verbose shows every check


def test_a_failing_check_stops_at_once_without_restarts(tmp_path: Path) -> None:
    result = scaletrain(
        "check", "--nproc", "2", "--name", "busy", "--dataloader-workers", "4", cwd=tmp_path
    )
    assert result.returncode == 1
    assert "preflight failed" in shown(result)
    # A failed check is a finding, not a crash: torchrun must not start the group again.
    folder = tmp_path / "runs" / "busy" / "logs"
    assert (folder / "rank-1.out").is_file() and not (folder / "restart-1").exists()


def test_bad_input_is_one_clean_error(tmp_path: Path) -> None:
    result = scaletrain("check", "--expected-cpu-masks", "zz", cwd=tmp_path)
    assert result.returncode == 2
    assert "is not a list of hex CPU masks" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists()


def _rank0(ranks: list[subprocess.CompletedProcess[str]]) -> str:
    return shown(ranks[0])


def test_ranks_bound_to_their_own_cores_pass_the_affinity_check(tmp_path: Path) -> None:
    # As srun --cpu-bind=mask_cpu:0x1,0x2 would bind two tasks on this 2-core machine.
    ranks = run_ranks(
        2,
        ["--expected-cpu-masks", "0x1,0x2"],
        prefix=[["taskset", "-c", "0"], ["taskset", "-c", "1"]],
    )
    assert [rank.returncode for rank in ranks] == [0, 0], _rank0(ranks)
    assert "FAIL" not in _rank0(ranks) and "preflight passed" in _rank0(ranks)


def test_wrong_affinity_fails_with_the_masks_to_bind(tmp_path: Path) -> None:
    # Both tasks on core 0, as when Slurm's binding does not follow the GPU numbering.
    ranks = run_ranks(
        2,
        ["--expected-cpu-masks", "0x1,0x2"],
        prefix=[["taskset", "-c", "0"], ["taskset", "-c", "0"]],
    )
    assert [rank.returncode for rank in ranks] == [1, 1]
    report = _rank0(ranks)
    assert "FAIL cpu-affinity (rank 1 on" in report
    assert "cores 0; local rank 1 is nearest to 1" in report
    assert "fix: bind each task to its GPU's cores: srun --cpu-bind=mask_cpu:0x1,0x2" in report
    assert "preflight failed" in report


def test_two_torchrun_ranks_seeing_only_device_0_fail_before_sharing_it(tmp_path: Path) -> None:
    # torchrun's ranks share the node's list: one visible GPU for two would be two ranks on
    # one GPU, which NCCL refuses ("Duplicate GPU detected").
    environ = clean_environ(CUDA_VISIBLE_DEVICES="0")
    result = torchrun(PREFLIGHT, "--expected-gpus-per-node", "2", nproc=2, environ=environ)
    assert result.returncode != 0
    assert "FAIL devices (rank 0-1 on" in shown(result), shown(result)
    assert "torchrun started 2 processes on this node but only 1 GPU(s) are visible" in (
        shown(result)
    )


def test_more_visible_gpus_than_expected_fails_naming_the_variable(tmp_path: Path) -> None:
    environ = clean_environ(HIP_VISIBLE_DEVICES="0,1,2")
    result = torchrun(PREFLIGHT, "--expected-gpus-per-node", "2", nproc=2, environ=environ)
    assert result.returncode != 0
    assert "sees 3 GPU(s); expected 1 (one task per GPU) or all 2" in shown(result)
    assert "HIP_VISIBLE_DEVICES=0,1,2" in shown(result)


def test_more_threads_than_cores_fails(tmp_path: Path) -> None:
    result = torchrun(PREFLIGHT, nproc=2, environ=clean_environ(OMP_NUM_THREADS="8"))
    assert result.returncode != 0
    # torch caps its threads at the machine's 2 cores; each rank may use only 1.
    assert "2 torch thread(s) (OMP_NUM_THREADS=8) on 1 core(s)" in shown(result)
    assert "fix: export OMP_NUM_THREADS=1" in shown(result)


def test_more_dataloader_workers_than_cores_fails(tmp_path: Path) -> None:
    result = torchrun(PREFLIGHT, "--dataloader-workers", "4", nproc=2)
    assert result.returncode != 0
    assert "4 DataLoader worker(s): workers and the training loop need more cores" in (
        shown(result)
    )


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs util-linux unshare")
def test_read_only_run_folder_fails_before_training(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "readonly"
    run_dir.mkdir(parents=True)
    # A read-only bind mount in a private mount namespace: even root cannot write there,
    # and the mount disappears with the namespace.
    command = (
        f"mount --bind -o ro {run_dir} {run_dir} && exec {sys.executable} -m "
        f"torch.distributed.run --standalone --nproc-per-node=2 --log-dir={tmp_path / 'logs'} "
        f"{PREFLIGHT}"
    )
    result = subprocess.run(
        ["unshare", "--mount", "--propagation", "private", "sh", "-c", command],
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT_S,
        env=clean_environ(SCALETRAIN_RUN_DIR=str(run_dir)),
        check=False,
    )
    if "mount:" in result.stderr and "permission denied" in result.stderr.lower():
        pytest.skip("mount namespaces are not allowed here")
    assert result.returncode != 0
    assert "FAIL run-folder (rank 0-1 on" in shown(result)
    assert "Read-only file system" in shown(result)
    assert "fix: put runs where every node can write" in shown(result)


def test_too_low_open_files_limit_fails_before_training(tmp_path: Path) -> None:
    # A real limit, set as a job script would: rank 0 of 2 needs 261 descriptors.
    command = (
        f"ulimit -n 260 && exec {sys.executable} -m torch.distributed.run --standalone "
        f"--nproc-per-node=2 {PREFLIGHT}"
    )
    result = subprocess.run(
        ["bash", "-c", command],
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT_S,
        # torchrun leaves its own temporary folder behind when its workers fail.
        env=clean_environ(TMPDIR=str(tmp_path)),
        check=False,
    )
    assert result.returncode != 0
    assert "FAIL open-files (rank 0 on" in shown(result), shown(result)
    assert "ulimit -n 260 (hard 260); 2 ranks need up to 261 per process" in shown(result)
