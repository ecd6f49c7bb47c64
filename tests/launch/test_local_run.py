"""`scaletrain run` with real processes: run folder, per-rank logs, failures."""

from __future__ import annotations

import json
import os
import uuid
from pathlib import Path

import pytest

from scaletrain.core.rank_files import read_beats
from scaletrain.core.run_folder import RunFolder
from scaletrain.launch.early_start import COMMAND_FROM_FD
from tests.checkpoint.conftest import POLL_S, kill_job, run_args
from tests.conftest import REPO, WORKERS, clean_environ, scaletrain, start_scaletrain
from tests.support.run_processes import (
    left_after,
    living,
    parent_of,
    processes_with,
    run_processes,
)
from tests.support.waiting import wait_until

pytestmark = pytest.mark.multiprocess


def test_two_processes_write_per_rank_logs_into_the_run_folder(tmp_path: Path) -> None:
    result = scaletrain(
        "run",
        "--nproc",
        "2",
        "--name",
        "hello",
        str(WORKERS / "hello.py"),
        "--",  # the script's own --nproc, named like run's: after `--` on purpose
        "--nproc",
        "x",
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stderr
    folder = tmp_path / "runs" / "hello"
    for rank in (0, 1):
        out = (folder / "logs" / f"rank-{rank}.out").read_text()
        assert f"hello from rank {rank} of 2 args=x" in out  # script got its own --nproc
        assert f"run dir {folder}" in out
        assert f"stderr of rank {rank}" in (folder / "logs" / f"rank-{rank}.err").read_text()
    # The console echoes rank 0 only.
    assert "hello from rank 0" in result.stdout and "hello from rank 1" not in result.stdout
    record = json.loads((folder / "run.json").read_text())
    assert record["exit_code"] == 0 and record["nproc"] == "2"
    assert "--nproc-per-node=2" in record["command"]
    assert "OMP_NUM_THREADS" not in record["variables"]  # the test set it; never overridden


def test_a_failing_rank_fails_the_run_and_its_traceback_is_shown(tmp_path: Path) -> None:
    result = scaletrain(
        "run",
        "-n",
        "2",
        "--name",
        "broken",
        "--max-restarts",
        "2",
        str(WORKERS / "hello.py"),
        "--fail-rank",
        "1",
        cwd=tmp_path,
    )
    assert result.returncode != 0
    assert "failed (exit code" in result.stdout  # the run's summary is its result
    # Restarted as often as asked (each restart has its own logs); the last one is shown.
    logs = tmp_path / "runs" / "broken" / "logs"
    assert (logs / "restart-2" / "rank-1.err").is_file()
    assert not (logs / "restart-3").exists()
    assert result.stderr.count("rank 1 failed on purpose") == 1
    record = json.loads((tmp_path / "runs" / "broken" / "run.json").read_text())
    assert record["exit_code"] == result.returncode


def test_missing_script_is_one_clean_error(tmp_path: Path) -> None:
    result = scaletrain("run", "--nproc", "2", "nope.py", cwd=tmp_path)
    assert result.returncode == 2
    assert "error: The training script 'nope.py' does not exist." in result.stderr
    assert "HINT:" in result.stderr and "Traceback" not in result.stderr
    assert not (tmp_path / "runs").exists()  # nothing was started or created


def test_bad_process_count_is_rejected(tmp_path: Path) -> None:
    result = scaletrain(
        "run", "--nproc", "zero", str(REPO / "examples/mnist/train.py"), cwd=tmp_path
    )
    assert result.returncode == 2 and "--nproc 'zero' is not a number" in result.stderr


def test_the_launcher_started_early_runs_the_script_with_the_runs_environment(
    tmp_path: Path,
) -> None:
    """torchrun's Python starts before the options are read and gets its command on a pipe
    (launch/early_start.py): the workers' parent is that process, and they see the run's
    variables and output streams, which were decided after it started."""
    environ = clean_environ(PROBE_OUT=str(tmp_path))
    result = scaletrain(
        "run", "--nproc", "2", "--name", "probe", "--max-restarts", "0", "--json",
        str(WORKERS / "argv_probe.py"), "--flag", cwd=tmp_path, environ=environ,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    # --json: the summary alone on stdout; the processes' own output went to stderr.
    assert json.loads(result.stdout)["run"] == "probe"
    assert "probe written" in result.stderr
    records = [json.loads(path.read_text()) for path in tmp_path.glob("*.json")]
    assert len(records) == 2
    for record in records:
        assert record["argv"][1:] == ["--flag"]
        assert record["environ"]["SCALETRAIN_RUN_DIR"] == str(tmp_path / "runs" / "probe")
        assert record["environ"]["TMPDIR"].startswith(os.environ["TMPDIR"])
        assert COMMAND_FROM_FD in record["parent_argv"]  # torchrun's agent, started early
    assert json.loads((tmp_path / "runs" / "probe" / "run.json").read_text())["exit_code"] == 0


def test_a_command_that_launches_nothing_leaves_no_launcher_behind(tmp_path: Path) -> None:
    mark = f"SCALETRAIN_TEST_MARK={uuid.uuid4().hex}"  # this test's processes carry it
    environ = clean_environ(SCALETRAIN_TEST_MARK=mark.split("=", 1)[1])
    for arguments in (["nope.py"], ["--nproc", "zero", str(WORKERS / "hello.py")]):
        result = scaletrain("run", *arguments, cwd=tmp_path, environ=environ)
        assert result.returncode == 2, result.stderr
        assert "Traceback" not in result.stderr
    assert left_after(lambda: processes_with({mark}), timeout=10) == {}


def test_a_killed_scaletrain_run_takes_torchrun_and_every_training_process_with_it(
    tmp_path: Path,
) -> None:
    """`kill -9` of the `scaletrain run` command itself (a closed terminal, an OOM kill):
    nothing is left to forward a signal, yet torchrun, the ranks, their DataLoader workers,
    forkservers and resource trackers all end by themselves. torchrun asks the ranks to stop
    (SIGTERM to each rank's process group): they save and stop, as on scancel, because the
    DataLoader workers and forkservers do not die of that signal before their rank saves."""
    run = tmp_path / "runs" / "orphaned"
    # One DataLoader worker per rank, paced so that the run is still training when killed.
    command = run_args("orphaned", "--workers", "1", "--epochs", "50", "--step-seconds", "0.05")
    process = start_scaletrain(*command, cwd=tmp_path, log=tmp_path / "run.log")
    try:
        wait_until(
            lambda: (
                all(beat.step >= 3 for beat in read_beats(RunFolder(run)).values())
                and len(read_beats(RunFolder(run))) == 2
            ),
            "both ranks to train",
            pause_s=POLL_S,
        )
        ranks = {beat.pid for beat in read_beats(RunFolder(run)).values()}
        running = run_processes(run)
        # What a kill would leave: torchrun, the ranks and what each rank started.
        helpers = {pid for pid in running if parent_of(pid) in ranks}
        assert ranks < running.keys() and len(helpers) >= 2, running
        # torchrun, started before it knew the run (launch/early_start.py): the ranks' parent.
        torchrun = {parent_of(pid) or 0 for pid in ranks}
        assert len(torchrun) == 1 and 0 not in torchrun, torchrun
        process.kill()
        process.wait()
        left = left_after(lambda: run_processes(run) | living(torchrun), timeout=30)
    finally:
        kill_job(process, run)
    assert left == {}, f"still running after `scaletrain run` was killed: {left}"
    stopped = json.loads((run / "stopped.json").read_text())
    assert stopped["reason"] == "SIGTERM" and Path(stopped["checkpoint"]).is_dir(), stopped
    # torchrun removed the run's temporary folder (what multiprocessing left there) as it ended.
    assert not list(Path(os.environ["TMPDIR"]).glob("scaletrain-orphaned-*"))
