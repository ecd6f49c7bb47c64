"""Hangs on the real test Slurm: a rank asleep in a step is named by `scaletrain stacks` and
by the watchdog, and the run goes on without its node; a training link cut with `ip link set
hsn0 down` ends the step within the limit and the job comes back without that node, resumes
and ends with the loss curve of an uninterrupted run; a 30-second blip passes; a node
failure's requeue is recorded.

They run on a cluster of their own: three nodes (one to take the blamed node's place) whose
Slurm talks over a management network (nmn0), as on real clusters, so that cutting hsn0 cuts
the training and not Slurm's control of the node.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from scaletrain.core.hang_report import read_hang_report
from scaletrain.core.rank_files import read_beats
from scaletrain.core.run_folder import RunFolder
from scaletrain.slurm.history import read_job_events
from tests.conftest import WORKERS, end_session, scaletrain, start_scaletrain
from tests.support.netns import set_link
from tests.support.slurm_cluster import SlurmCluster, running_cluster
from tests.support.slurm_jobs import finished, job_environ, submit, submit_options
from tests.support.waiting import wait_until

# The resumable worker itself: `submit` reads its st.Checkpointer, so the run resumes.
RESUMABLE = WORKERS / "resumable.py"

pytestmark = [pytest.mark.slurm, pytest.mark.multiprocess]

SLEEP_LINE = "resumable.py:{} in sleep_inside_step".format(
    (WORKERS / "resumable.py").read_text().splitlines().index("        time.sleep(seconds)") + 1
)
GRACEFUL_STOP = WORKERS / "graceful_stop.py"
# The resumable worker paced at 50 ms per step, a checkpoint every 10 steps.
PACED = ("--step-seconds", "0.05", "--every-steps", "10")


@pytest.fixture(scope="module")
def three_nodes(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    with running_cluster(
        tmp_path_factory.mktemp("three-nodes"), 3, management_network=True
    ) as cluster:
        yield cluster


def worker(name: str, *args: str) -> tuple[str, ...]:
    return (str(RESUMABLE), "--out", f"runs/{name}/out", *args)


def records(path: Path) -> list[dict[str, Any]]:
    return (
        [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
        if path.is_file()
        else []
    )


def losses(folder: RunFolder) -> dict[int, float]:
    """The loss at every step (metrics/train.jsonl); a step redone after a resume counts as
    its last run."""
    return {record["step"]: record["loss"] for record in records(folder.metrics / "train.jsonl")}


def test_a_rank_asleep_in_a_step_is_named_and_the_run_goes_on_without_its_node(
    three_nodes: SlurmCluster, tmp_path: Path
) -> None:
    """`scaletrain stacks` signals every rank through srun and names the sleeping rank and its
    line; `logs -f` says the job went silent; the watchdog names the rank and ends the step.
    This job may not be requeued (as at sites that forbid it), so the job script submits
    the run again as a new job without the rank's node, which resumes and finishes."""
    environ = job_environ(three_nodes, tmp_path)
    limit = 20
    options = submit_options(
        "asleep", "srun", 2, 1, "--no-check", "--hang-limit", str(limit), "--max-requeues", "1"
    )
    args = worker("asleep", *PACED, "--sleep-rank", "1", "--sleep-at-step", "15")
    folder, job_id = submit(three_nodes, tmp_path, environ, options, *args)
    no_requeue = three_nodes.run(["scontrol", "update", f"JobId={job_id}", "Requeue=0"])
    assert no_requeue.returncode == 0, no_requeue.stderr
    follow = start_scaletrain(
        "logs", "-f", "asleep", "--notice-after", "5", cwd=tmp_path, log=tmp_path / "follow.log",
        environ=environ,
    )  # fmt: skip
    slept = folder.root / "out" / "slept"
    asleep_since = wait_until(slept.exists, "rank 1 to sleep", three_nodes)
    stacks = scaletrain("stacks", "asleep", cwd=tmp_path, environ=environ)
    assert stacks.returncode == 0, stacks.stderr
    rows = {line.split()[0]: line for line in stacks.stdout.splitlines() if line[:1].isdigit()}
    assert rows["0"].split()[1] == "n1" and "waiting in a collective" in rows["0"]
    assert rows["1"].split()[1] == "n2" and f"busy, at {SLEEP_LINE}" in rows["1"]
    assert "the others wait for: rank 1 on n2" in " ".join(stacks.stderr.split())
    # The dumps came through the signal (faulthandler), written on each node.
    assert all((folder.stacks / "signal" / f"rank-{rank}.txt").stat().st_size for rank in (0, 1))

    # status makes the silence visible: the last step both finished (14), how long ago (and
    # growing: asked twice, a second apart; `stacks` may answer within a second), nodes.
    def status() -> dict[str, Any]:
        shown = scaletrain("status", "--json", "asleep", cwd=tmp_path, environ=environ)
        return dict(json.loads(shown.stdout))

    silent = status()
    time.sleep(1.0)
    later = status()
    for seen in (silent, later):
        assert (seen["state"], seen["last_step"], seen["phase"]) == ("RUNNING", 14, "loop")
        assert seen["since_last_output_s"] is not None
    # (figures rounded to 0.1 s)
    assert later["since_last_step_s"] >= max(silent["since_last_step_s"] + 0.9, 1)
    assert sorted(silent["node_states"]) == ["n1", "n2"]

    assert end_session(follow) == 0
    resubmitted_at = wait_until(
        lambda: len(read_job_events(folder)) == 2, "the run to be submitted again", three_nodes
    )
    assert resubmitted_at - asleep_since < limit + 60  # not the 600 s of the sleep
    silence = (tmp_path / "follow.log").read_text()
    assert "warning: no output for" in silence and "scaletrain stacks asleep" in silence
    report = read_hang_report(folder.hang_report)
    assert report is not None
    assert [(rank.rank, rank.host) for rank in report.stopped_first] == [(1, "n2")]
    assert SLEEP_LINE in report.stopped_first[0].why and report.blamed_nodes == ["n2"]
    first, second = read_job_events(folder)
    assert (first.event, first.job_id) == ("submitted", job_id)
    assert second.event == "submitted" and second.job_id != job_id
    assert second.details == {"by": "job script", "after": job_id, "excluded": "n2"}
    output = finished(three_nodes, folder, second.job_id)
    status = scaletrain("status", "--json", "asleep", cwd=tmp_path, environ=environ)
    info = json.loads(status.stdout)
    assert (info["job_id"], info["state"]) == (second.job_id, "COMPLETED")
    assert info["excluded_nodes"] == "n2" and "2" not in info["nodelist"]
    (resume,) = records(folder.resumes)
    assert resume["step"] == 10 and "slurm_restart_count" not in resume, output
    doctor = scaletrain("doctor", str(folder.root), cwd=tmp_path, environ=environ)
    assert "hang-watchdog: Training hung" in doctor.stdout


def test_a_cut_link_ends_the_step_and_the_job_comes_back_without_the_node(
    three_nodes: SlurmCluster, tmp_path: Path
) -> None:
    environ = job_environ(three_nodes, tmp_path)
    limit = 10
    args = worker("cut", *PACED, "--epochs", "8")
    options = submit_options("cut", "torchrun", 2, 1, "--no-check", "--hang-limit", str(limit))
    folder, job_id = submit(three_nodes, tmp_path, environ, options, *args)
    # The same training, uninterrupted, on this machine meanwhile.
    reference_args = worker("reference", "--no-checkpoints", "--epochs", "8")
    reference = start_scaletrain(
        "run", "--nproc", "2", "--name", "reference", *reference_args,
        cwd=tmp_path, log=tmp_path / "reference.log",
    )  # fmt: skip

    def trained_past_a_checkpoint() -> bool:
        return (folder.checkpoints / "LATEST").is_file() and max(losses(folder), default=0) >= 45

    wait_until(trained_past_a_checkpoint, "a checkpoint and some steps after it", three_nodes)
    cut = read_beats(folder)[1].host
    try:
        set_link(three_nodes.network, cut, up=False)
        cut_at = time.monotonic()
        step_at_cut = max(losses(folder))
        requeued_at = wait_until(
            lambda: len(read_job_events(folder)) > 1, "the job to requeue", three_nodes
        )
        output = finished(three_nodes, folder, job_id)
    finally:
        set_link(three_nodes.network, cut, up=True)
    assert end_session(reference) == 0, (tmp_path / "reference.log").read_text()[-3000:]
    assert requeued_at - cut_at < limit + 60, output
    events = read_job_events(folder)
    assert [(event.event, event.job_id) for event in events] == [
        ("submitted", job_id), ("requeued", job_id),
    ]  # fmt: skip
    assert events[1].details == {"restart_count": 1, "reason": "hang", "excluded": cut}
    report = read_hang_report(folder.hang_report)
    assert report is not None and report.blamed_nodes == [cut]
    assert [rank.host for rank in report.stopped_first] == [cut]
    assert "has its network interface hsn0 down" in report.summary
    status = json.loads(scaletrain("status", "--json", "cut", cwd=tmp_path, environ=environ).stdout)
    assert status["excluded_nodes"] == cut and cut not in status["nodelist"]
    (resume,) = records(folder.resumes)
    assert resume["slurm_restart_count"] == 1 and resume["step"] % 10 == 0
    # Resumed from its checkpoint, it ends with the losses of a run never interrupted.
    expected, got = losses(RunFolder(tmp_path / "runs" / "reference")), losses(folder)
    assert got == expected
    print(
        f"\ncut at step {step_at_cut}: requeued after {requeued_at - cut_at:.1f} s "
        f"(limit {limit} s), resumed from step {resume['step']}"
    )


def test_a_thirty_second_blip_passes_without_a_restart(
    three_nodes: SlurmCluster, tmp_path: Path
) -> None:
    """TCP retransmits through the blip with growing gaps, so steps stall ~50 s: under a
    90 s limit the watchdog only reports it."""
    environ = job_environ(three_nodes, tmp_path)
    options = submit_options("blip", "torchrun", 2, 1, "--no-check", "--hang-limit", "90")
    args = worker("blip", *PACED, "--epochs", "6")
    folder, job_id = submit(three_nodes, tmp_path, environ, options, *args)
    wait_until(lambda: max(losses(folder), default=0) >= 20, "some steps", three_nodes)
    node = read_beats(folder)[1].host
    try:
        set_link(three_nodes.network, node, up=False)
        time.sleep(30)
    finally:
        set_link(three_nodes.network, node, up=True)
    output = finished(three_nodes, folder, job_id)
    assert [event.event for event in read_job_events(folder)] == ["submitted"]
    assert not folder.hang_report.exists() and not folder.resumes.exists()
    if "no step for" in output:  # a stall past half the limit is reported, and its end
        assert "steps resumed" in output
    assert max(losses(folder)) == 6 * 16


def test_a_requeue_after_a_node_failure_is_recorded(
    three_nodes: SlurmCluster, tmp_path: Path
) -> None:
    """Slurm requeues a --requeue job by itself when a node fails; the rerun's job script
    records it, with Slurm's reason. The training's side: a worker that waits on its first
    run and ends at once when rerun."""
    environ = job_environ(three_nodes, tmp_path)
    options = submit_options("failing", "srun", 1, 1, "--no-check")
    folder, job_id = submit(three_nodes, tmp_path, environ, options, str(GRACEFUL_STOP))
    wait_until((folder.root / "training-started").exists, "the job to run", three_nodes)
    node = three_nodes.run(["squeue", "--noheader", "--format=%N", f"--jobs={job_id}"]).stdout
    try:
        # What Slurm does when a node stops answering for SlurmdTimeout, at once.
        down = ["scontrol", "update", f"NodeName={node.strip()}", "State=DOWN", "Reason=test"]
        assert three_nodes.run(down).returncode == 0
        output = finished(three_nodes, folder, job_id)
    finally:
        three_nodes.run(["scontrol", "update", f"NodeName={node.strip()}", "State=RESUME"])
    events = read_job_events(folder)
    assert [(event.event, event.job_id) for event in events] == [
        ("submitted", job_id), ("requeued", job_id),
    ], output  # fmt: skip
    # Slurm's words for it come from the node or from srun, whichever wrote them.
    assert events[1].details == {"restart_count": 1, "by": "slurm", "reason": "node failure"}, (
        output
    )
    assert (folder.root / "runs.txt").read_text().splitlines()[-1] == (
        "restart 1: resumed and finished"
    )
    doctor = scaletrain("doctor", str(folder.root), cwd=tmp_path, environ=environ)
    assert "node-failure: Slurm declared a node of the job failed" in doctor.stdout


def test_a_hang_in_a_partition_without_spare_nodes_requeues_on_the_same_nodes(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """Two nodes, both needed: leaving out the blamed one would keep the job pending for
    ever (BadConstraints). It is requeued on the same nodes instead, says so, and resumes."""
    environ = job_environ(slurm_cluster, tmp_path)
    options = submit_options("spareless", "srun", 2, 1, "--no-check", "--hang-limit", "15")
    args = worker(
        "spareless", *PACED, "--epochs", "3", "--sleep-rank", "1", "--sleep-at-step", "15"
    )
    folder, job_id = submit(slurm_cluster, tmp_path, environ, options, *args)
    wait_until(
        lambda: len(read_job_events(folder)) == 2, "the job to requeue itself", slurm_cluster
    )
    output = finished(slurm_cluster, folder, job_id)
    assert (
        "scaletrain: training hung; continuing the run on the same nodes (requeue 1 of at most "
        "3): partition debug has 2 nodes, and this 2-node job could never run again without 'n2'"
    ) in output
    first, second = read_job_events(folder)
    assert (first.event, second.event, second.job_id) == ("submitted", "requeued", job_id)
    assert second.details == {"restart_count": 1, "reason": "hang", "excluded": "", "kept": "n2"}
    status = json.loads(
        scaletrain("status", "--json", "spareless", cwd=tmp_path, environ=environ).stdout
    )
    assert (status["state"], status["excluded_nodes"]) == ("COMPLETED", "")
    (resume,) = records(folder.resumes)
    assert resume["step"] == 10 and resume["slurm_restart_count"] == 1
