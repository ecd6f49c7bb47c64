"""`scaletrain submit --rehearse` on the test Slurm (22.05): the rehearsal on the debug
partition first, the real job behind it with --dependency=afterok; a good job's real run
starts after its rehearsal passed and takes about the predicted time, a job that fails in
step 2 never starts its real run, and `status`, `logs` and `doctor` name the error."""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from scaletrain.core.run_folder import RunFolder
from scaletrain.slurm.history import read_job_events
from scaletrain.slurm.output import parse_key_values
from tests.conftest import WORKERS, scaletrain
from tests.support.slurm_cluster import SlurmCluster
from tests.support.slurm_jobs import job_environ, submit_options

pytestmark = pytest.mark.slurm

# The rehearsal (~40 s on a loaded 2-core machine), then the real job (~90 s).
PAIR_TIMEOUT_S = 420
# resumable.py: 256 samples in global batches of 16 = 16 steps per epoch; paced so that the
# steps, not the start-up, make most of the real job's time.
EPOCHS, STEP_S = 8, 0.5
REHEARSAL_STEPS = 5


def submit_rehearsed(
    cluster: SlurmCluster, tmp_path: Path, name: str, *worker_args: str
) -> tuple[RunFolder, str, str, dict[str, str]]:
    """`scaletrain submit --rehearse` of resumable.py on 1 node × 2; the run folder, the
    rehearsal's and the real job's ids, and the environment."""
    environ = job_environ(cluster, tmp_path)
    options = submit_options(name, "srun", 1, 2, "--rehearse", "--rehearsal-steps",
                             str(REHEARSAL_STEPS), "--json")  # fmt: skip
    worker = (str(WORKERS / "resumable.py"), "--out", f"runs/{name}/out",
              "--epochs", str(EPOCHS), "--step-seconds", str(STEP_S), *worker_args)  # fmt: skip
    result = scaletrain(
        "submit", *options, *worker, cwd=tmp_path, environ=environ, venv=cluster.user_venv
    )
    assert result.returncode == 0, result.stderr
    assert "rehearsal     1 node(s) × 2 on debug first (0:15:00): 5 steps" in result.stderr
    submitted = json.loads(result.stdout)
    folder = RunFolder(tmp_path / "runs" / name)
    return folder, submitted["rehearsal_job_id"], submitted["job_id"], environ


def job_fields(cluster: SlurmCluster, job_id: str) -> dict[str, str]:
    """`scontrol show job` of a job that ended within MinJobAge (300 s)."""
    shown = cluster.run(["scontrol", "show", "job", "--oneliner", job_id])
    assert shown.returncode == 0, shown.stderr
    return parse_key_values(shown.stdout)


def moment(fields: dict[str, str], key: str) -> datetime:
    return datetime.fromisoformat(fields[key])


def status(tmp_path: Path, environ: dict[str, str], name: str, *more: str) -> Any:
    result = scaletrain("status", name, *more, cwd=tmp_path, environ=environ)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout) if more else result.stdout


def test_a_good_job_starts_after_its_rehearsal_in_the_predicted_time(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    folder, rehearsal, real, environ = submit_rehearsed(slurm_cluster, tmp_path, "good")
    assert slurm_cluster.wait_for_job(real, timeout=PAIR_TIMEOUT_S) == "COMPLETED"
    assert slurm_cluster.wait_for_job(rehearsal) == "COMPLETED"

    # The rehearsal: its own folder, a save, a resume from it, five more steps, a clean stop.
    rehearsed = folder.rehearsal
    said = (rehearsed.logs / f"good-rehearsal-{rehearsal}.out").read_text()
    assert "rehearsal passed: 5 steps, a checkpoint saved and resumed, 5 more steps" in said
    assert "resumed from" in said and "step-0000005" in said
    assert json.loads(rehearsed.stopped_marker.read_text())["reason"] == "rehearsal"
    assert json.loads(rehearsed.rehearsal_report.read_text())["weights_came_back"] is True
    # Its checkpoints never seeded the real run, which trained every step from the start.
    output = (folder.logs / f"good-{real}.out").read_text()
    assert "resumed from" not in output and not folder.resumes.exists()
    assert f"step {EPOCHS * 16}/{EPOCHS * 16}" in output
    events = read_job_events(folder)
    assert [(e.event, e.job_id, e.details.get("rehearsal")) for e in events] == [
        ("submitted", real, rehearsal)
    ]

    # The real job started only once the rehearsal had ended.
    rehearsal_job, real_job = job_fields(slurm_cluster, rehearsal), job_fields(slurm_cluster, real)
    assert real_job["Partition"] == rehearsal_job["Partition"] == "debug"
    assert moment(real_job, "StartTime") >= moment(rehearsal_job, "EndTime")

    # Its report predicts the real job's duration within 20%.
    report = status(tmp_path, environ, "good", "--json")["rehearsal"]
    assert (report["job_id"], report["verdict"]) == (rehearsal, "passed")
    took = (moment(real_job, "EndTime") - moment(real_job, "StartTime")).total_seconds()
    assert abs(report["predicted_s"] - took) <= 0.2 * took, (report, took)
    assert STEP_S <= report["step_s"] < 2 * STEP_S
    assert report["samples_per_s"] == pytest.approx(16 / report["step_s"])
    table = status(tmp_path, environ, "good")
    assert f"job {rehearsal} passed: 5 steps, a checkpoint saved in" in table
    assert "the same weights, 5 more" in table
    assert "predicted" in table and "the rehearsal's own size" in table
    # ~1.5 minutes asked as 10: shorter jobs start sooner.
    assert "--time 0:10:00 is far too long: ask for 0:0" in table


def test_a_job_that_fails_in_step_2_never_starts_and_status_says_why(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    folder, rehearsal, real, environ = submit_rehearsed(
        slurm_cluster, tmp_path, "broken", "--fail-at-step", "2"
    )
    assert slurm_cluster.wait_for_job(real, timeout=PAIR_TIMEOUT_S) == "CANCELLED"
    assert slurm_cluster.wait_for_job(rehearsal) == "FAILED"
    real_job = job_fields(slurm_cluster, real)
    assert real_job["Reason"] == "DependencyNeverSatisfied"
    assert real_job["NodeList"] == ""  # it never ran
    assert not folder.logs.exists() or not any(folder.logs.iterdir())

    error = "RuntimeError: deliberate error at step 2"
    table = status(tmp_path, environ, "broken")
    assert f"job {rehearsal} failed (FAILED (NonZeroExitCode)): {error}" in table
    assert "cancelled by Slurm before it started: its rehearsal failed" in table
    assert "- of 00:10:00" in table  # not Slurm's run time since 1970 of a job that never ran
    assert status(tmp_path, environ, "broken", "--json")["rehearsal"]["error"] == error
    # logs: the real job wrote nothing, so the rehearsal's output is shown.
    logs = scaletrain("logs", "broken", cwd=tmp_path, environ=environ)
    assert logs.returncode == 0, logs.stderr
    assert f"it runs only after its rehearsal, job {rehearsal}, passed" in logs.stderr
    assert error in logs.stdout and "rehearsal failed (exit status" in logs.stdout
    followed = scaletrain("logs", "-f", "broken", cwd=tmp_path, environ=environ)
    assert followed.returncode == 0, followed.stderr
    assert error in followed.stdout
    assert f"job {rehearsal} of the rehearsal of run broken: FAILED" in followed.stderr
    assert f"job {real} of run broken: CANCELLED (DependencyNeverSatisfied)" in followed.stderr
    doctor = scaletrain("doctor", str(folder.root), cwd=tmp_path, environ=environ)
    assert doctor.returncode == 1 and error in doctor.stdout + doctor.stderr


def test_cancelling_the_run_cancels_its_rehearsal_too(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    folder, rehearsal, real, environ = submit_rehearsed(slurm_cluster, tmp_path, "dropped")
    cancelled = scaletrain("cancel", "dropped", cwd=tmp_path, environ=environ)
    assert cancelled.returncode == 0, cancelled.stderr
    assert f"cancelled job {real} of run dropped and its rehearsal, job {rehearsal}" in (
        cancelled.stderr
    )
    assert slurm_cluster.wait_for_job(rehearsal) == "CANCELLED"
    assert slurm_cluster.wait_for_job(real) == "CANCELLED"
    assert [e.event for e in read_job_events(folder)] == ["submitted", "cancelled"]
    assert [e.event for e in read_job_events(folder.rehearsal)] == ["submitted", "cancelled"]


def test_a_script_without_scaletrain_passes_by_training_until_its_end(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """No st.Checkpointer to rehearse: training that reaches the rehearsal's end (its time
    limit less the stop margin) without an error passes, and the real job starts."""
    release = tmp_path / "release"  # task_probe.py waits for it (60 s at most), then ends
    environ = job_environ(
        slurm_cluster, tmp_path, PROBE_DIR=str(tmp_path), PROBE_WAIT_FOR=str(release)
    )
    # 75 s less a fifth: training ends 60 s after the job started, before the probe would.
    options = submit_options("plain", "srun", 1, 1, "--rehearse", "--rehearsal-time", "1:15",
                             "--json")  # fmt: skip
    result = scaletrain(
        "submit", *options, str(WORKERS / "task_probe.py"), cwd=tmp_path, environ=environ,
        venv=slurm_cluster.user_venv,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "training until 0:01:00 without an error (no st.Checkpointer to rehearse)" in (
        result.stderr
    )
    submitted = json.loads(result.stdout)
    rehearsal, real = submitted["rehearsal_job_id"], submitted["job_id"]
    assert slurm_cluster.wait_for_job(rehearsal, timeout=PAIR_TIMEOUT_S) == "COMPLETED"
    folder = RunFolder(tmp_path / "runs" / "plain")
    said = (folder.rehearsal.logs / f"plain-rehearsal-{rehearsal}.out").read_text()
    assert "preflight passed" in said
    assert "rehearsal passed: trained without an error until its end, 60 s after" in said
    release.touch()
    assert slurm_cluster.wait_for_job(real, timeout=PAIR_TIMEOUT_S) == "COMPLETED"
    table = status(tmp_path, environ, "plain")
    assert f"job {rehearsal} passed: trained without an error (no save and resume" in table
