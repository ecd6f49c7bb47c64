"""slurm/commands.py against the real local cluster: every call a user's command makes."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scaletrain.core.errors import ScaletrainError
from scaletrain.slurm import commands as slurm
from tests.conftest import SLURM_SCRIPTS, WORKERS, clean_environ
from tests.support.slurm_cluster import NODE_CPUS, PARTITION, SlurmCluster


def sleep_job(cluster: SlurmCluster, folder: Path) -> str:
    """Submit the sleeping job from `folder` and wait until its USR1 trap is in place."""
    (folder / "logs").mkdir(parents=True, exist_ok=True)
    job_id = slurm.submit(SLURM_SCRIPTS / "sleep.sbatch", cwd=folder, environ=cluster.environ())
    deadline = time.monotonic() + 60
    while not (folder / "trap-ready").exists():
        assert time.monotonic() < deadline, f"job {job_id} did not start\n{cluster.logs()}"
        time.sleep(0.2)
    return job_id


_PRINT_IN_ASCII_LOCALE = r"""
import locale, os
from scaletrain.slurm.commands import run_command
print(locale.getpreferredencoding(False))
print(ascii(run_command("printf", "caf\\303\\251 \\377", environ=os.environ)))
"""


def test_slurm_output_is_read_as_utf8_whatever_the_login_shells_locale() -> None:
    # A job or partition name in UTF-8, read under LANG=C without Python's UTF-8 coercion
    # (a site's old container, a batch environment); printf stands in for squeue's bytes.
    environ = {**os.environ, "LC_ALL": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0"}
    done = subprocess.run(
        [sys.executable, "-c", _PRINT_IN_ASCII_LOCALE],
        env=environ, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    encoding, printed = done.stdout.splitlines()
    assert encoding == "ANSI_X3.4-1968"  # the locale really was ASCII
    assert printed == ascii("café \ufffd")  # an invalid byte is replaced, not an error


def test_a_machine_without_slurm_gets_a_clear_error(tmp_path: Path) -> None:
    environ = clean_environ(PATH=str(tmp_path))
    with pytest.raises(ScaletrainError) as caught:
        slurm.submit(tmp_path / "job.sbatch", cwd=tmp_path, environ=environ)
    assert caught.value.problem.startswith("Slurm's sbatch was not found")
    assert "login node" in caught.value.hint and "module load slurm" in caught.value.hint


@pytest.mark.slurm
def test_submit_and_look_up_a_finished_job(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    environ = slurm_cluster.environ(PYTHON=sys.executable, WORKERS=str(WORKERS), OUT=str(tmp_path))
    job_id = slurm.submit(
        SLURM_SCRIPTS / "python-without-srun.sbatch", cwd=tmp_path, environ=environ
    )
    assert job_id.isdigit()
    assert slurm_cluster.wait_for_job(job_id) == "FAILED"
    info = slurm.job_info(job_id, environ=environ)
    assert info is not None and not info.is_active
    assert (info.job_id, info.name, info.state) == (job_id, "python-without-srun", "FAILED")
    assert info.reason == "NonZeroExitCode" and info.exit_code == "1:0"
    assert (info.num_nodes, info.nodelist, info.restarts) == (1, "n1", 0)
    assert info.time_limit == "00:02:00"


@pytest.mark.slurm
def test_a_job_slurm_has_forgotten_is_none_without_accounting(
    slurm_cluster: SlurmCluster,
) -> None:
    # scontrol does not know it and sacct says accounting is disabled: no error, no state.
    assert slurm.job_info("987654", environ=slurm_cluster.environ()) is None


@pytest.mark.slurm
def test_a_failing_command_names_itself_slurms_message_and_a_hint(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    environ = slurm_cluster.environ()
    with pytest.raises(slurm.SlurmCommandError) as caught:
        slurm.requeue("987654", environ=environ)
    assert caught.value.problem == (
        "`scontrol requeue 987654` failed (exit code 1): Invalid job id specified for job 987654"
    )
    assert caught.value.hint.startswith("Slurm does not know this job")
    with pytest.raises(slurm.SlurmCommandError) as caught:
        slurm.submit(
            SLURM_SCRIPTS / "sleep.sbatch",
            cwd=tmp_path,
            environ=environ,
            options=["--partition=gpu"],
        )
    assert "Invalid partition name specified" in caught.value.problem
    assert (
        caught.value.hint == "list the partitions with `sinfo --summarize` and choose one of them."
    )


@pytest.mark.slurm
def test_signal_to_the_batch_shell_then_requeue_then_cancel(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    environ = slurm_cluster.environ()
    signalled = sleep_job(slurm_cluster, tmp_path / "signalled")
    slurm.cancel(signalled, environ=environ, signal="USR1", batch_only=True)
    assert slurm_cluster.wait_for_job(signalled) == "COMPLETED"  # the trap ended it cleanly
    assert (tmp_path / "signalled" / "usr1-received").is_file()

    requeued = sleep_job(slurm_cluster, tmp_path / "requeued")
    slurm.requeue(requeued, environ=environ)
    info = slurm.job_info(requeued, environ=environ)
    assert info is not None and info.is_active and info.restarts == 1
    slurm.cancel(requeued, environ=environ)
    assert slurm_cluster.wait_for_job(requeued) == "CANCELLED"


@pytest.mark.slurm
def test_hostnames_partitions_and_nodes(slurm_cluster: SlurmCluster) -> None:
    environ = slurm_cluster.environ()
    assert slurm.hostnames("n[1-2]", environ=environ) == ["n1", "n2"]
    (partition,) = slurm.partitions(environ=environ)
    assert (partition.name, partition.nodes, partition.is_default) == (PARTITION, "n[1-2]", True)
    assert (partition.total_nodes, partition.total_cpus) == (2, 2 * NODE_CPUS)
    assert (partition.max_time, partition.state) == ("UNLIMITED", "UP")
    nodes = slurm.nodes(environ=environ)
    assert [node.name for node in nodes] == ["n1", "n2"]
    for node in nodes:
        assert node.address == slurm_cluster.network.addresses[node.name]
        assert (node.cpus, node.partitions, node.gres) == (NODE_CPUS, (PARTITION,), "")
        assert node.state in {"IDLE", "MIXED", "ALLOCATED"}


@pytest.mark.slurm
def test_every_run_of_a_requeued_job_from_accounting(
    accounting_cluster: SlurmCluster, slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    environ = accounting_cluster.environ()
    (tmp_path / "logs").mkdir()
    job_id = slurm.submit(
        SLURM_SCRIPTS / "sleep.sbatch", cwd=tmp_path, environ=environ, options=["--requeue"]
    )
    ready = tmp_path / "trap-ready"
    for run in ("first", "after the requeue"):
        deadline = time.monotonic() + 60
        while not ready.exists():
            assert time.monotonic() < deadline, (
                f"{run} run did not start\n{accounting_cluster.logs()}"
            )
            time.sleep(0.2)
        ready.unlink()
        if run == "first":
            slurm.requeue(job_id, environ=environ)
    slurm.cancel(job_id, environ=environ, signal="USR1", batch_only=True)  # ends with 0
    assert accounting_cluster.wait_for_job(job_id) == "COMPLETED"
    runs = slurm.job_runs([job_id], environ=environ)
    assert runs is not None and [(r.job_id, r.state) for r in runs] == [
        (job_id, "REQUEUED"), (job_id, "COMPLETED"),
    ]  # fmt: skip
    for run in runs:
        assert run.start is not None and run.end is not None
        assert run.elapsed_s == run.end - run.start and run.nodes == 1
        assert run.energy_joules is None  # no energy plugin on the test cluster
    assert runs[0].end <= runs[1].start
    # Without accounting, sacct has nothing to say: None, not an error.
    assert slurm.job_runs([job_id], environ=slurm_cluster.environ()) is None
