"""`scaletrain status`, `logs` and `cancel`: their errors, and real jobs on the local Slurm."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from scaletrain.core.run_folder import RunFolder
from scaletrain.slurm import commands as slurm
from scaletrain.slurm.history import read_job_events, record_job_event
from tests.conftest import (
    SLURM_SCRIPTS,
    WORKERS,
    clean_environ,
    end_session,
    kill_session,
    scaletrain,
    start_scaletrain,
)
from tests.support.slurm_cluster import SlurmCluster
from tests.support.slurm_jobs import job_environ, submit, submit_options
from tests.support.waiting import wait_until


def running_job(
    cluster: SlurmCluster, runs: Path, name: str, script: str, **extra: str
) -> tuple[RunFolder, str]:
    """What `scaletrain submit` will do (run folder, sbatch from it, jobs.jsonl), then wait
    until the job runs; `extra` is exported to the job."""
    folder = RunFolder(runs / name).create()
    environ = cluster.environ(
        PYTHON=sys.executable, WORKERS=str(WORKERS), SCALETRAIN_RUN_DIR=str(folder.root), **extra
    )
    job_id = slurm.submit(SLURM_SCRIPTS / script, cwd=folder.root, environ=environ)
    record_job_event(folder, "submitted", job_id)
    deadline = time.monotonic() + 60
    while (info := slurm.job_info(job_id, environ=environ)) and info.state != "RUNNING":
        assert time.monotonic() < deadline, f"job {job_id} stays {info.state}\n{cluster.logs()}"
        time.sleep(0.2)
    return folder, job_id


def said(result: subprocess.CompletedProcess[str]) -> str:
    """What the command told the user on stderr, with rich's line wrapping undone."""
    return " ".join(result.stderr.split())


@pytest.mark.parametrize("command", ["status", "logs", "cancel"])
def test_no_run_folders(tmp_path: Path, command: str) -> None:
    result = scaletrain(command, "--runs-dir", "nothing-here", cwd=tmp_path)
    assert result.returncode == 2
    assert "error: There are no run folders in nothing-here/." in said(result)
    assert "HINT: start a run first" in said(result)


def test_unknown_run_lists_the_runs_there(tmp_path: Path) -> None:
    RunFolder(tmp_path / "runs" / "mnist-1").create()
    result = scaletrain("status", "mnist-2", cwd=tmp_path)
    assert result.returncode == 2
    assert "There is no run named 'mnist-2' in runs/." in said(result)
    assert "newest first: mnist-1" in said(result)


@pytest.mark.parametrize("command", ["status", "logs", "cancel"])
def test_a_run_that_never_started(tmp_path: Path, command: str) -> None:
    RunFolder(tmp_path / "runs" / "empty").create()
    result = scaletrain(command, cwd=tmp_path)
    assert result.returncode == 2
    assert (
        "Run 'empty' was never started: its jobs.jsonl does not exist (scaletrain submit) "
        "and it has no run.json (scaletrain run)." in said(result)
    )


@pytest.mark.multiprocess
def test_logs_and_cancel_of_a_local_run(tmp_path: Path) -> None:
    """What a user types after `scaletrain run` in another shell: logs, logs -f, cancel."""
    run = tmp_path / "runs" / "local"
    worker = [str(WORKERS / "resumable.py"), "--out", str(run / "out"), "--epochs", "100"]
    launch = start_scaletrain(
        "run", "--nproc", "2", "--name", "local", *worker, "--step-seconds", "0.1",
        cwd=tmp_path, log=tmp_path / "run.log",
    )  # fmt: skip
    followed, told = tmp_path / "followed.out", tmp_path / "followed.err"
    try:
        wait_until(lambda: (run / "metrics" / "train.jsonl").is_file(), "a step", timeout_s=120)
        printed = scaletrain("logs", cwd=tmp_path)
        assert printed.returncode == 0, printed.stderr
        assert re.match(r"step +1/", printed.stdout)  # rank 0's stdout: st.Progress
        assert "scaletrain: 2 process(es) on 1 node" in printed.stderr  # its stderr: st.init()
        with followed.open("w") as stdout, told.open("w") as stderr:
            follower = subprocess.Popen(
                [str(Path(sys.executable).with_name("scaletrain")), "logs", "-f", "local"],
                cwd=tmp_path, env=clean_environ(), stdout=stdout, stderr=stderr,
            )  # fmt: skip
        cancelled = scaletrain("cancel", cwd=tmp_path)
        assert cancelled.returncode == 0, cancelled.stderr
        assert f"stopping run local (scaletrain pid {launch.pid}) as Ctrl-C does" in said(cancelled)
        assert end_session(launch) == 0, (tmp_path / "run.log").read_text()[-3000:]
        assert follower.wait(timeout=30) == 0, told.read_text()
    finally:
        kill_session(launch)
    stopped = json.loads((run / "stopped.json").read_text())
    ended = f"run local: stopped at step {stopped['step']} (SIGTERM); run the same command"
    assert ended in " ".join(told.read_text().split())
    # -f printed everything rank 0 printed, up to its end.
    assert followed.read_text() == (run / "logs" / "rank-0.out").read_text()
    assert re.search(rf"^step +{stopped['step']}/", followed.read_text(), re.MULTILINE)
    again = scaletrain("cancel", "local", cwd=tmp_path)
    assert again.returncode == 0
    assert "run local is not running: stopped at step" in said(again)


def test_without_slurm_the_error_says_where_to_run(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "runs" / "r").create()
    record_job_event(folder, "submitted", "123")
    result = scaletrain("status", "r", cwd=tmp_path, environ=clean_environ(PATH=str(tmp_path)))
    assert result.returncode == 2
    assert "Slurm's scontrol was not found on this machine" in said(result)
    assert "HINT: run this on a login node of your cluster" in said(result)


@pytest.mark.slurm
@pytest.mark.multiprocess
def test_status_and_logs_follow_a_training_job(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    _, job_id = running_job(slurm_cluster, runs, "train", "progress.sbatch")
    environ = slurm_cluster.environ()
    running = scaletrain("status", "--json", cwd=tmp_path, environ=environ)  # newest run
    assert running.returncode == 0, running.stderr
    status = json.loads(running.stdout)
    assert (status["run"], status["job_id"], status["state"]) == ("train", job_id, "RUNNING")
    assert (status["num_nodes"], status["nodelist"], status["time_limit"]) == (1, "n1", "00:05:00")

    followed = scaletrain("logs", "--follow", cwd=tmp_path, environ=environ)
    assert followed.returncode == 0, followed.stderr
    assert followed.stdout.startswith(f"job {job_id} on n1\n")
    assert followed.stdout.rstrip().endswith("all steps done")
    assert f"job {job_id} of run train: COMPLETED" in said(followed)
    step_lines = [line for line in followed.stdout.splitlines() if line.startswith("step ")]
    assert [line.split("|")[0] for line in step_lines] == [
        f"step {n}/6 {n / 6:4.0%} " for n in range(1, 7)
    ]
    # Without -f: the whole file at once, the same text.
    assert scaletrain("logs", "train", cwd=tmp_path, environ=environ).stdout == followed.stdout

    finished = scaletrain("status", "train", cwd=tmp_path, environ=environ)
    assert finished.returncode == 0
    for shown in (
        "COMPLETED",
        "1 (n1)",
        "restarts",
        f"train-{job_id}.out".replace("train", "progress"),
    ):
        assert shown in finished.stdout  # the status is the result
    status = json.loads(scaletrain("status", "--json", cwd=tmp_path, environ=environ).stdout)
    # status rebuilds the last progress line from metrics/train.jsonl, exactly as printed.
    assert status["progress"] == step_lines[-1]
    assert (status["state"], status["restarts"]) == ("COMPLETED", 0)
    assert status["output"] == f"runs/train/logs/progress-{job_id}.out"  # as --runs-dir is given


@pytest.mark.slurm
def test_cancel_a_running_job(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    folder, job_id = running_job(slurm_cluster, runs, "sleepy", "sleep.sbatch")
    environ = slurm_cluster.environ()
    slurm.requeue(job_id, environ=environ)  # as the job script does after a graceful stop

    cancelled = scaletrain("cancel", "sleepy", cwd=tmp_path, environ=environ)
    assert cancelled.returncode == 0, cancelled.stderr
    assert f"cancelled job {job_id} of run sleepy" in said(cancelled)
    last = read_job_events(folder)[-1]
    assert (last.event, last.job_id) == ("cancelled", job_id)
    assert slurm_cluster.wait_for_job(job_id) == "CANCELLED"

    status = json.loads(scaletrain("status", "--json", cwd=tmp_path, environ=environ).stdout)
    assert (status["state"], status["restarts"]) == ("CANCELLED", 1)
    again = scaletrain("cancel", cwd=tmp_path, environ=environ)
    assert again.returncode == 0
    assert f"job {job_id} of run sleepy already ended (CANCELLED)" in said(again)
    assert len(read_job_events(folder)) == 2  # submitted, cancelled: nothing added


@pytest.mark.slurm
@pytest.mark.multiprocess
def test_logs_follow_a_job_through_its_requeue(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    folder, job_id = running_job(slurm_cluster, tmp_path / "runs", "again", "progress.sbatch")
    environ = slurm_cluster.environ()
    command = [str(Path(sys.executable).with_name("scaletrain")), "logs", "-f", "again"]
    with subprocess.Popen(
        command,
        cwd=tmp_path,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as follower:
        output = folder.logs / f"progress-{job_id}.out"
        deadline = time.monotonic() + 60
        while "step 3/6" not in (output.read_text() if output.exists() else ""):
            assert time.monotonic() < deadline, slurm_cluster.logs()
            time.sleep(0.2)
        # As the job script does after a graceful stop. The rerun starts ~12 s later (see the
        # cred_expire gotcha in tests/support/slurm_cluster.py).
        slurm.requeue(job_id, environ=environ)
        stdout, stderr = follower.communicate(timeout=120)
    assert follower.returncode == 0, stderr
    # The rerun rewrote the file from the start: both runs' first lines were followed.
    assert stdout.count(f"job {job_id} on ") == 2
    assert stdout.rstrip().endswith("all steps done") and "COMPLETED" in stderr
    status = json.loads(scaletrain("status", "--json", cwd=tmp_path, environ=environ).stdout)
    assert (status["state"], status["restarts"]) == ("COMPLETED", 1)


# Stands in for scontrol, earlier on PATH: once armed, its first call hangs for 90 s (longer
# than scaletrain waits for any Slurm command) and its second fails as scontrol does while
# the controller is down; every other call is the real scontrol's. One process, so the
# caller's timeout ends all of it.
_SLOW_SCONTROL = """\
#!{python}
import os, sys, time
from pathlib import Path
folder = Path({folder!r})
if (folder / "armed").exists():
    calls = folder / "calls"
    calls.write_text(calls.read_text() + "x" if calls.exists() else "x")
    if calls.read_text() == "x":
        (folder / "hanging").touch()
        time.sleep(90)
    elif calls.read_text() == "xx":
        sys.exit("slurm_load_jobs error: Unable to contact slurm controller (connect failure)")
os.execv({real!r}, [{real!r}, *sys.argv[1:]])
"""


@pytest.mark.slurm
def test_logs_follow_rides_out_a_slow_then_absent_controller(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """A busy controller: one `scontrol show job` hangs past scaletrain's limit for a Slurm
    command, the next finds no controller. Following goes on, says so, and ends with the job."""
    stand_in = tmp_path / "slow-slurm"
    stand_in.mkdir()
    scontrol = stand_in / "scontrol"
    real = str(slurm_cluster.bin / "scontrol")
    scontrol.write_text(
        _SLOW_SCONTROL.format(python=sys.executable, folder=str(stand_in), real=real)
    )
    scontrol.chmod(0o755)
    _, job_id = running_job(slurm_cluster, tmp_path / "runs", "busy", "ticking.sbatch", TICKS="85")
    environ = slurm_cluster.environ()
    environ["PATH"] = f"{stand_in}:{environ['PATH']}"
    command = [str(Path(sys.executable).with_name("scaletrain")), "logs", "-f", "busy"]
    followed, said_file = tmp_path / "followed.out", tmp_path / "followed.err"
    with (
        followed.open("w") as stdout,
        said_file.open("w") as stderr,
        subprocess.Popen(
            command, cwd=tmp_path, env=environ, stdout=stdout, stderr=stderr
        ) as follower,
    ):
        wait_until(
            lambda: "tick 3\n" in followed.read_text(), "tick 3", slurm_cluster, timeout_s=60
        )
        (stand_in / "armed").touch()
        wait_until((stand_in / "hanging").exists, "scontrol to hang", slurm_cluster, timeout_s=10)
        ticks_then = followed.read_text().count("tick ")
        wait_until(
            lambda: "Slurm slow, still following" in said_file.read_text(),
            "the note that Slurm is slow",
            slurm_cluster,
            timeout_s=20,
        )
        # While scontrol hangs, the job's output keeps coming.
        wait_until(
            lambda: followed.read_text().count("tick ") >= ticks_then + 5,
            "5 ticks more while scontrol hangs",
            slurm_cluster,
            timeout_s=20,
        )
        assert follower.wait(timeout=120) == 0, said_file.read_text()
    told = " ".join(said_file.read_text().split())
    assert "did not answer within 60 s" in told
    assert "Unable to contact slurm controller" in told
    assert "Slurm answers again" in told
    assert told.endswith(f"job {job_id} of run busy: COMPLETED")
    lines = followed.read_text().splitlines()
    assert lines == [f"tick {n}" for n in range(1, 86)] + ["all ticks done"]
    assert (stand_in / "calls").read_text().startswith("xxx")  # it did ask again, for real


@pytest.mark.slurm
@pytest.mark.multiprocess
def test_status_of_a_script_without_scaletrain_reports_no_steps(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """The preflight (scaletrain's own, before training) leaves no heartbeat that status
    would take for the training's: a script without scaletrain reports no steps."""
    probe = tmp_path / "probe"
    probe.mkdir()
    environ = job_environ(slurm_cluster, tmp_path, PROBE_DIR=str(probe))
    options = submit_options("plain", "torchrun", 1, 1)
    script = str(WORKERS / "unconverted_ddp.py")
    folder, job_id = submit(slurm_cluster, tmp_path, environ, options, script, "--sleep", "60")
    wait_until((probe / "rank-0.json").exists, "a step", slurm_cluster, timeout_s=120)
    assert (folder.report / "preflight.json").is_file()  # after the preflight
    shown = scaletrain("status", cwd=tmp_path, environ=environ)
    assert shown.returncode == 0, shown.stderr
    assert "RUNNING" in shown.stdout
    last_step = "│ last step   │ no steps reported (the script does not use scaletrain)"
    assert last_step in shown.stdout, shown.stdout
    status = json.loads(scaletrain("status", "--json", cwd=tmp_path, environ=environ).stdout)
    assert (status["state"], status["last_step"], status["phase"]) == ("RUNNING", None, "")
    assert scaletrain("cancel", cwd=tmp_path, environ=environ).returncode == 0
    assert slurm_cluster.wait_for_job(job_id) == "CANCELLED"


@pytest.mark.slurm
def test_status_names_a_job_pending_on_its_own_exclusion(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """A 2-node job that excludes one node of the 2-node partition never starts; status says
    so, and how to lift the exclusion, instead of a bare PENDING (BadConstraints)."""
    folder = RunFolder(tmp_path / "runs" / "stuck").create()
    environ = slurm_cluster.environ()
    job_id = slurm.submit(
        SLURM_SCRIPTS / "sleep.sbatch",
        cwd=folder.root,
        environ=environ,
        options=["--hold", "--nodes=2", "--ntasks=2"],
    )
    record_job_event(folder, "submitted", job_id)
    try:
        for change in (["update", f"JobId={job_id}", "ExcNodeList=n2"], ["release", job_id]):
            done = slurm_cluster.run(["scontrol", *change])
            assert done.returncode == 0, done.stderr
        wait_until(
            lambda: (
                (info := slurm.job_info(job_id, environ=environ)) is not None
                and info.reason == "BadConstraints"
            ),
            "the job to wait on its exclusion",
            slurm_cluster,
            timeout_s=60,
        )
        shown = scaletrain("status", "stuck", cwd=tmp_path, environ=environ)
        status = json.loads(scaletrain("status", "--json", cwd=tmp_path, environ=environ).stdout)
    finally:
        slurm.cancel(job_id, environ=environ)
    assert status["waits_on_its_exclusion"] and status["excluded_nodes"] == "n2"
    assert "n2: the job waits on this exclusion" in " ".join(shown.stdout.split())
    assert f"scontrol update JobId={job_id} ExcNodeList=" in " ".join(shown.stdout.split())
