"""Hostile input that needs Slurm's own commands, on the real test Slurm: a relative PATH
entry holding sbatch, a runs folder that cannot be made, a job Slurm no longer knows, and a
dry run written after the script. (The rest: test_hostile_inputs.py.)"""

from __future__ import annotations

from pathlib import Path

import pytest

from scaletrain.core.run_folder import RunFolder
from scaletrain.slurm.history import read_job_events, record_job_event
from tests.conftest import WORKERS, scaletrain
from tests.support.slurm_cluster import SlurmCluster
from tests.support.slurm_jobs import job_environ, submit_options

pytestmark = pytest.mark.slurm

PROBE = str(WORKERS / "task_probe.py")


def test_sbatch_found_through_a_relative_path_entry(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    # `PATH=fb:$PATH`: sbatch runs from the run folder, where `fb/` is not the same folder.
    (tmp_path / "fb").mkdir()
    (tmp_path / "fb" / "sbatch").symlink_to(slurm_cluster.bin / "sbatch")
    environ = job_environ(slurm_cluster, tmp_path, PROBE_DIR=str(tmp_path))
    environ["PATH"] = f"fb:{environ['PATH'].replace(f'{slurm_cluster.bin}:', '')}"
    options = submit_options("relative", "srun", 1, 1, "--no-check")
    result = scaletrain("submit", *options, PROBE, cwd=tmp_path, environ=environ)
    assert result.returncode == 0, result.stderr
    job_id = result.stdout.strip()
    assert job_id.isdigit() and "Traceback" not in result.stderr
    assert slurm_cluster.wait_for_job(job_id) == "COMPLETED"


def test_a_runs_folder_that_cannot_be_made_is_one_clean_error(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    environ = job_environ(slurm_cluster, tmp_path)
    options = [*submit_options("x", "srun", 1, 1), "--runs-dir", "/proc/forbidden"]
    result = scaletrain("submit", *options, PROBE, cwd=tmp_path, environ=environ)
    assert result.returncode == 2
    assert "error: Cannot use /proc/forbidden: No such file or directory." in result.stderr
    assert "HINT:" in result.stderr and "Traceback" not in result.stderr


def test_a_job_slurm_no_longer_knows_is_not_said_to_wait(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    folder = RunFolder(tmp_path / "runs" / "old").create()
    record_job_event(folder, "submitted", "999999")  # long gone; this site keeps no accounting
    environ = job_environ(slurm_cluster, tmp_path)
    status = scaletrain("status", cwd=tmp_path, environ=environ)
    assert status.returncode == 0, status.stderr
    assert "Slurm no longer knows this job" in status.stdout
    assert "has not started yet" not in status.stdout
    cancel = scaletrain("cancel", "old", cwd=tmp_path, environ=environ)
    assert cancel.returncode == 0 and "already ended (no longer known to Slurm)" in cancel.stderr
    assert len(read_job_events(folder)) == 1  # nothing recorded for a job that was not there
    logs = scaletrain("logs", "old", cwd=tmp_path, environ=environ)
    assert logs.returncode == 2 and "(state: no longer known to Slurm)" in logs.stderr


def test_a_dry_run_after_the_script_submits_nothing(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    environ = job_environ(slurm_cluster, tmp_path)
    before = slurm_cluster.run(["squeue", "--noheader", "--format=%i"]).stdout
    options = submit_options("dry", "srun", 1, 1)
    result = scaletrain("submit", *options, PROBE, "--dry-run", cwd=tmp_path, environ=environ)
    assert result.returncode == 2
    assert "put --dry-run before" in result.stderr
    assert not (tmp_path / "runs").exists()
    assert slurm_cluster.run(["squeue", "--noheader", "--format=%i"]).stdout == before
