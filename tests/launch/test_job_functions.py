"""The batch shell's functions that every job script sources (templates/job_functions.sh),
run by bash with stand-ins for scontrol and sbatch that record their arguments: what each
requeue does with Slurm and writes into the job history. The real test Slurm runs them in
test_requeue_on_slurm.py and test_hang_on_slurm.py."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from scaletrain.core import variables
from scaletrain.core.run_folder import RunFolder
from scaletrain.launch.job_programs import JOB_FUNCTIONS, program_text, write_job_programs
from scaletrain.launch.watchdog.requeue import HangRequeue, write_decision
from tests.conftest import clean_environ
from tests.support.job_scripts import shellcheck

# Each stand-in appends its name and arguments to calls.txt, one call a line, and exits with
# the status in <name>.status (0 when there is none).
STAND_IN = """#!/bin/bash
echo "$(basename "$0") $*" >>"$CALLS"
[[ $(basename "$0") == sbatch ]] && echo 778
exit "$(cat "$STATUS_DIR/$(basename "$0").status" 2>/dev/null || echo 0)"
"""


def run(tmp_path: Path, code: str, fail: tuple[str, ...] = (), **environ: str) -> dict[str, Any]:
    """`code` after sourcing the functions in a run folder; its status, output, calls, history."""
    folder = RunFolder(tmp_path / "run").create()
    write_job_programs(folder.programs)
    bin_folder = tmp_path / "bin"
    bin_folder.mkdir(exist_ok=True)
    for command in ("scontrol", "sbatch"):
        (bin_folder / command).write_text(STAND_IN)
        (bin_folder / command).chmod(0o755)
    for command in fail:
        (tmp_path / f"{command}.status").write_text("1")
    calls = tmp_path / "calls.txt"
    script = f'run_dir={folder.root}\nsource "$run_dir/programs/{JOB_FUNCTIONS}"\n{code}\n'
    result = subprocess.run(
        ["bash", "-c", script],
        env=clean_environ(
            PATH=f"{bin_folder}:/usr/bin:/bin",
            CALLS=str(calls),
            STATUS_DIR=str(tmp_path),
            SLURM_JOB_ID="41",
            SLURM_JOB_NAME="mnist",
            **environ,
        ),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    history = folder.jobs_log.read_text().splitlines() if folder.jobs_log.exists() else []
    return {
        "status": result.returncode,
        "stdout": result.stdout,
        "stderr": result.stderr,
        "calls": calls.read_text().splitlines() if calls.exists() else [],
        "events": [json.loads(line) for line in history],
        "folder": folder,
    }


def without_time(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{key: value for key, value in event.items() if key != "time"} for event in events]


@pytest.mark.skipif(shutil.which("shellcheck") is None, reason="shellcheck is not installed")
def test_the_functions_pass_shellcheck(tmp_path: Path) -> None:
    write_job_programs(tmp_path)
    assert shellcheck({"job_functions": (tmp_path / JOB_FUNCTIONS).read_text()}, tmp_path) == ""


def test_a_stop_at_a_checkpoint_requeues_until_the_limit(tmp_path: Path) -> None:
    done = run(tmp_path, "requeue_after_stop 3; echo not here", SLURM_RESTART_COUNT="1")
    assert (done["status"], done["calls"]) == (0, ["scontrol requeue 41"])
    assert without_time(done["events"]) == [
        {"event": "requeued", "job_id": "41", "restart_count": 2}
    ]
    assert "requeueing job 41 (restart 2 of at most 3)" in done["stderr"]
    # At the limit: said, and the script goes on (to its own exit status).
    limit = run(tmp_path / "limit", "requeue_after_stop 3; exit 9", SLURM_RESTART_COUNT="3")
    assert (limit["status"], limit["calls"], limit["events"]) == (9, [], [])
    assert "not requeued: the job was requeued 3 times (--max-requeues 3)" in limit["stderr"]
    refused = run(tmp_path / "refused", "requeue_after_stop 3", fail=("scontrol",))
    assert refused["status"] == 1 and "could not requeue job 41" in refused["stderr"]


def hang_run(tmp_path: Path, decision: HangRequeue, fail: tuple[str, ...] = ()) -> dict[str, Any]:
    folder = RunFolder(tmp_path / "run")
    folder.root.mkdir(parents=True)
    write_decision(folder.hang_decision, decision)
    return run(tmp_path, "requeue_after_hang 75; echo not here", fail=fail)


def test_a_hang_requeues_held_until_the_nodes_are_left_out(tmp_path: Path) -> None:
    decision = HangRequeue(
        requeue=True, restart_count=1, exclude="n2", changed=True, message="training hung; go on"
    )
    done = hang_run(tmp_path, decision)
    assert done["status"] == 0 and "scaletrain: training hung; go on" in done["stderr"]
    assert done["calls"] == [
        "scontrol requeuehold 41",
        "scontrol update JobId=41 ExcNodeList=n2",
        "scontrol release 41",
    ]
    assert without_time(done["events"]) == [
        {"event": "requeued", "job_id": "41", "restart_count": 1, "reason": "hang",
         "excluded": "n2"}
    ]  # fmt: skip
    # The nodes stay as they are: no update.
    same = hang_run(tmp_path / "same", HangRequeue(requeue=True, restart_count=1, exclude="n2"))
    assert same["calls"] == ["scontrol requeuehold 41", "scontrol release 41"]


def test_a_hang_where_requeueing_is_refused_submits_the_run_again(tmp_path: Path) -> None:
    decision = HangRequeue(requeue=True, restart_count=2, exclude="n[2,5]", changed=True)
    done = hang_run(tmp_path, decision, fail=("scontrol",))
    assert done["status"] == 0
    assert done["calls"] == [
        "scontrol requeuehold 41",
        "sbatch --parsable --export=ALL --exclude=n[2,5] job.sbatch",
    ]
    assert without_time(done["events"]) == [
        {"event": "submitted", "job_id": "778", "by": "job script", "after": "41",
         "excluded": "n[2,5]"}
    ]  # fmt: skip
    assert "submitted job 778 to continue the run" in done["stderr"]
    nothing = hang_run(tmp_path / "nothing", decision, fail=("scontrol", "sbatch"))
    assert nothing["status"] == 75 and "could not requeue or resubmit" in nothing["stderr"]


def test_a_hang_without_requeues_left_ends_with_the_watchdogs_status(tmp_path: Path) -> None:
    decision = HangRequeue(requeue=False, message="training hung; not requeued: 3 times")
    done = hang_run(tmp_path, decision)
    assert (done["status"], done["calls"], done["events"]) == (75, [], [])
    assert "scaletrain: training hung; not requeued: 3 times" in done["stderr"]
    # No decision at all (the watchdog could not write it): ended, not requeued.
    lost = run(tmp_path / "lost", "requeue_after_hang 75")
    assert lost["status"] == 75 and lost["calls"] == []


def test_a_requeue_slurm_made_by_itself_is_recorded_once(tmp_path: Path) -> None:
    log = "srun: error: Node failure on n2\nslurmstepd: *** JOB 41 CANCELLED DUE TO NODE FAILURE\n"
    folder = RunFolder(tmp_path / "run")
    folder.logs.mkdir(parents=True)
    (folder.logs / "mnist-41.out").write_text(log)
    code = "record_slurm_requeue; record_slurm_requeue"
    slurms = run(tmp_path, code, SLURM_RESTART_COUNT="1")
    assert without_time(slurms["events"]) == [
        {"event": "requeued", "job_id": "41", "restart_count": 1, "by": "slurm",
         "reason": "node failure"}
    ]  # fmt: skip
    assert run(tmp_path / "first", "record_slurm_requeue")["events"] == []


def test_wait_for_returns_the_status_of_a_process_the_trap_interrupted(tmp_path: Path) -> None:
    code = (
        "trap 'echo trapped >&2' USR1; (sleep 1; exit 7) & child=$!; "
        '(sleep 0.3; kill -USR1 $$) & wait_for "$child"; echo "status $?"'
    )
    done = run(tmp_path, code)
    assert "trapped" in done["stderr"] and done["stdout"] == "status 7\n"


def test_the_functions_name_files_and_variables_as_the_python_side_does() -> None:
    """Bash cannot import run_folder.py or variables.py: their names, checked here."""
    text = program_text(JOB_FUNCTIONS)
    folder = RunFolder(Path("run"))
    for name in (folder.jobs_log.name, folder.hang_decision.name, folder.job_script.name):
        assert name in text, name
    assert f'"$run_dir/{folder.logs.name}/$SLURM_JOB_NAME-$SLURM_JOB_ID.out"' in text
    assert f"{variables.REQUEUE_COUNT}=" in text
