"""The hang watchdog of `scaletrain run`, with real processes: a rank that sleeps inside a
step is named and the run ended; pauses the watchdog must not end are left alone."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from scaletrain.core.hang_report import HANG_EXIT_STATUS, read_hang_report
from scaletrain.core.run_folder import RunFolder
from tests.checkpoint.conftest import POLL_S
from tests.conftest import WORKERS, clean_environ, end_session, scaletrain, start_scaletrain
from tests.support.waiting import wait_until

# The resumable worker itself: `submit` reads its st.Checkpointer, so the run resumes.
RESUMABLE = WORKERS / "resumable.py"

pytestmark = pytest.mark.multiprocess

# Where a rank of resumable.py sleeps inside a step, as the watchdog names it.
SLEEP_LINE = "resumable.py:{} in sleep_inside_step".format(
    (WORKERS / "resumable.py").read_text().splitlines().index("        time.sleep(seconds)") + 1
)


def run_command(name: str, limit: int, *worker_args: str) -> list[str]:
    return ["run", "--nproc", "2", "--name", name, "--hang-limit", str(limit),
            "--max-restarts", "3", str(RESUMABLE), "--out", f"runs/{name}/out",
            "--step-seconds", "0.05", *worker_args]  # fmt: skip


def test_a_rank_asleep_in_a_step_is_named_and_the_run_ended(tmp_path: Path) -> None:
    limit = 20
    command = run_command("asleep", limit, "--sleep-rank", "1", "--sleep-at-step", "5")
    wide = clean_environ(COLUMNS="300")  # rich wraps table cells at the terminal's width
    process = start_scaletrain(*command, cwd=tmp_path, log=tmp_path / "asleep.log", environ=wide)
    run = RunFolder(tmp_path / "runs" / "asleep")
    slept = run.root / "out" / "slept"
    asleep_since = wait_until(slept.exists, "rank 1 to fall asleep", pause_s=POLL_S)
    stacks = scaletrain("stacks", "asleep", cwd=tmp_path, environ=wide)
    exit_code = end_session(process, timeout=limit + 120)
    ended_after = time.monotonic() - asleep_since
    # While it slept: rank 0 waits in DDP's backward, rank 1 is named with its line.
    said = " ".join(stacks.stderr.split())
    assert stacks.returncode == 0, stacks.stderr
    rows = {line.split()[0]: line for line in stacks.stdout.splitlines() if line[:1].isdigit()}
    assert "waiting in a collective" in rows["0"] and "_engine_run_backward" in rows["0"]
    assert f"busy, at {SLEEP_LINE}" in rows["1"]
    assert "the others wait for: rank 1 on" in said and SLEEP_LINE in said
    # The watchdog ended the run well before the 600 s sleep, and neither torchrun's
    # restarts nor the sleeping rank outlived it.
    assert exit_code == HANG_EXIT_STATUS, (tmp_path / "asleep.log").read_text()[-3000:]
    assert ended_after < limit + 60
    report = read_hang_report(run.hang_report)
    assert report is not None and report.step == 4 and report.answered == 2
    assert [(r.rank, r.why.endswith(SLEEP_LINE)) for r in report.stopped_first] == [(1, True)]
    assert report.blamed_nodes == []  # one machine: nothing to leave out
    dumps = run.root / report.stacks
    assert "sleep_inside_step" in (dumps / "rank-1.txt").read_text()
    assert "_engine_run_backward" in (dumps / "rank-0.txt").read_text()
    assert json.loads(run.run_record.read_text())["exit_code"] == HANG_EXIT_STATUS
    console = (tmp_path / "asleep.log").read_text()
    assert "the watchdog ended it (exit code 75)" in console
    assert "ending the training step" in (run.logs / "watchdog.log").read_text()
    assert not (run.logs / "restart-1").exists()  # torchrun did not restart the group


def test_pauses_shorter_than_the_limit_and_evaluations_go_on(tmp_path: Path) -> None:
    """A 10 s pause inside a step with a 16 s limit is reported halfway and left alone; a
    20 s evaluation outside the training loop is not a hang at all."""
    command = run_command(
        "pauses", 16, "--sleep-rank", "1", "--sleep-at-step", "5", "--sleep-seconds", "10",
        "--evaluation-seconds", "20", "--epochs", "1",
    )  # fmt: skip
    result = scaletrain(*command, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "no step for 0:00:08 after step 4" in result.stderr  # reported at half the limit
    assert "steps resumed (step" in result.stderr and "nothing was ended" in result.stderr
    run = RunFolder(tmp_path / "runs" / "pauses")
    assert not run.hang_report.exists()
    assert json.loads((run.metrics / "summary.json").read_text())["steps"] == 16
