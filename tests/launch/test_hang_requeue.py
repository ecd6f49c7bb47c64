"""What a job does after its watchdog ended a hung step (launch/watchdog/requeue.py): requeue or
not, which nodes to leave out, and the key=value lines (hang.env) the job script reads."""

from __future__ import annotations

import json
import subprocess

import pytest

from scaletrain.launch.watchdog.requeue import (
    HangRequeue,
    SlurmJob,
    decide_requeue,
    read_slurm_job,
)

# `scontrol --oneliner show job` and `show partition`, shortened to the fields that matter.
JOB_LINE = "JobId=41 JobName=mnist Partition=debug NumNodes=2 ExcNodeList=n[7-8] Restarts=1"
PARTITION_LINE = "PartitionName=debug AllowGroups=ALL TotalNodes=10 TotalCPUs=40 State=UP"


def test_slurms_view_of_the_job_comes_from_scontrols_lines_and_the_environment() -> None:
    environ = {"SLURM_RESTART_COUNT": "1", "SCALETRAIN_REQUEUE_COUNT": "1"}
    job = read_slurm_job(JOB_LINE, PARTITION_LINE, environ | {"SLURM_JOB_NUM_NODES": "2"})
    assert job == SlurmJob(
        nodes=2, partition="debug", excluded=("n7", "n8"), partition_nodes=10, requeues=2
    )
    # scontrol failed (its output is empty) or shows no list: nothing known, nothing excluded.
    unknown = read_slurm_job("", "", {"SLURM_JOB_NUM_NODES": "4"})
    assert unknown == SlurmJob(nodes=4)
    assert read_slurm_job("JobId=1 ExcNodeList=(null) NumNodes=3", "", {}).excluded == ()
    assert read_slurm_job("JobId=1 ExcNodeList=(null) NumNodes=3", "", {}).nodes == 3


def test_a_hung_job_is_requeued_without_the_blamed_nodes_and_those_it_left_out() -> None:
    job = SlurmJob(nodes=2, partition="debug", excluded=("n7",), partition_nodes=10, requeues=1)
    decision = decide_requeue(["n2", "n7"], job, max_requeues=3)
    assert decision == HangRequeue(
        requeue=True,
        restart_count=2,
        exclude="n[2,7]",
        changed=True,
        message="training hung; continuing the run without nodes n[2,7] (requeue 2 of at most 3)",
    )
    assert json.loads("{" + decision.event.removeprefix(",") + "}") == {
        "restart_count": 2,
        "reason": "hang",
        "excluded": "n[2,7]",
    }
    # Nobody blamed: the same nodes, nothing to change.
    same = decide_requeue([], job, max_requeues=3)
    assert (same.requeue, same.exclude, same.changed) == (True, "n7", False)
    assert same.message.endswith("without nodes n7 (requeue 2 of at most 3)")


def test_nodes_the_job_cannot_do_without_are_kept() -> None:
    """Leaving out n2 of a 2-node partition would keep the job pending for ever."""
    job = SlurmJob(nodes=2, partition="debug", partition_nodes=2)
    decision = decide_requeue(["n2"], job, max_requeues=3)
    assert (decision.requeue, decision.exclude, decision.kept) == (True, "", "n2")
    assert not decision.changed  # the job excluded nothing before, and excludes nothing now
    assert decision.message == (
        "training hung; continuing the run on the same nodes (requeue 1 of at most 3): "
        "partition debug has 2 nodes, and this 2-node job could never run again without 'n2'"
    )
    assert json.loads("{" + decision.event.removeprefix(",") + "}") == {
        "restart_count": 1,
        "reason": "hang",
        "excluded": "",
        "kept": "n2",
    }
    # What it left out before goes back too: the job is updated to exclude nothing.
    earlier = decide_requeue(["n2"], SlurmJob(nodes=2, excluded=("n1",), partition_nodes=3), 3)
    assert (earlier.exclude, earlier.kept, earlier.changed) == ("", "n[1-2]", True)
    # A partition of unknown size: nothing is left out.
    assert decide_requeue(["n2"], SlurmJob(nodes=2), 3).kept == "n2"


def test_a_job_requeued_as_often_as_allowed_ends() -> None:
    decision = decide_requeue(["n2"], SlurmJob(nodes=2, partition_nodes=10, requeues=3), 3)
    assert not decision.requeue
    assert decision.message == (
        "training hung; not requeued: the job was requeued 3 times (--max-requeues 3). Submit "
        "the run again to continue it."
    )


def test_bash_reads_each_value_as_written_and_runs_none() -> None:
    """hang.env is read with `IFS== read -r key value`: '=', quotes, `$(...)` stay text."""
    decision = HangRequeue(requeue=True, exclude="n1", message="a=b '$(touch pwned)' \"c\" `d`")
    program = (
        'declare -A next=(); while IFS="=" read -r key value; do next[$key]=$value; done; '
        'printf "%s\\n" "${next[message]}" "${next[requeue]}" "${next[event]}"'
    )
    read = subprocess.run(
        ["bash", "-c", program], input=decision.lines(), capture_output=True, text=True, check=True
    )
    assert read.stdout.splitlines() == [decision.message, "yes", decision.event]
    with pytest.raises(ValueError, match="line break"):
        HangRequeue(requeue=False, message="two\nlines").lines()
