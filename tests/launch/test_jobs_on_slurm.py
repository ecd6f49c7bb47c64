"""Generated jobs on the real 2-node test Slurm: `scaletrain submit` for every launch mode whose
tool installs here, each rank checked, output in the run folder; quoting and per-task values
for real; the job script's side of the graceful stop and requeue."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from scaletrain.launch import slurm
from scaletrain.launch.jobs import read_job_events
from scaletrain.launch.render import JobOptions, render_job_script
from scaletrain.launch.submission import submit_job
from scaletrain.run_folder import RunFolder
from tests.conftest import REPO, WORKERS, scaletrain
from tests.support.job_scripts import plan_for
from tests.support.slurm_cluster import SlurmCluster

pytestmark = pytest.mark.slurm

EXAMPLE = REPO / "examples" / "mnist" / "train.py"
# A job has started, run and ended within this; a requeued one waits ~12 s more to restart.
JOB_TIMEOUT_S = 180


def job_environ(cluster: SlurmCluster, tmp_path: Path, **extra: str) -> dict[str, str]:
    """A login node's environment: Slurm's commands, and this venv's python3/torchrun/...
    first on PATH (sbatch passes it on to the job, as an activated venv would be)."""
    environ = cluster.environ(XDG_CONFIG_HOME=str(tmp_path / "config"), COLUMNS="200", **extra)
    environ["PATH"] = f"{cluster.bin}:{Path(sys.executable).parent}:{environ['PATH']}"
    return environ


def submit(
    cluster: SlurmCluster,
    cwd: Path,
    environ: dict[str, str],
    *arguments: str,
) -> tuple[RunFolder, str]:
    """`scaletrain submit -c local <arguments>` from `cwd`; the run folder and the job id."""
    result = scaletrain(
        "submit", "--cluster", "local", "--time", "10:00", *arguments, cwd=cwd, environ=environ
    )
    assert result.returncode == 0, result.stderr
    name = arguments[arguments.index("--name") + 1]
    return RunFolder(cwd / "runs" / name), result.stdout.strip()


def finished(cluster: SlurmCluster, folder: RunFolder, job_id: str) -> str:
    """Wait for the job; its output, from the run folder's logs/ (named %x-%j.out)."""
    state = cluster.wait_for_job(job_id, timeout=JOB_TIMEOUT_S)
    output = folder.logs / f"{folder.name}-{job_id}.out"
    assert output.is_file(), f"{state}: no {output}\n{cluster.logs()}"
    text = output.read_text()
    assert state == "COMPLETED", f"{state}\n{text}"
    return text


def reports(folder: Path, pattern: str) -> list[dict[str, Any]]:
    """JSON reports written by the ranks or tasks, by rank."""
    found = [json.loads(path.read_text()) for path in folder.glob(pattern)]
    return sorted(found, key=lambda report: report.get("rank", 0))


@pytest.fixture(scope="module")
def mnist_data(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The small MNIST stand-in, written once (as `--create-small-data` would on rank 0)."""
    sys.path.insert(0, str(EXAMPLE.parent))
    from make_small_mnist import write_small_mnist

    root = tmp_path_factory.mktemp("mnist")
    write_small_mnist(root)
    return root


def check_mnist_trained(folder: RunFolder, output: str, launcher: str, hosts: list[str]) -> None:
    """Every rank passed the preflight as the rank it should be, and the model learned."""
    preflight = json.loads((folder.report / "preflight.json").read_text())
    ranks = [entry["facts"] for entry in preflight["ranks"]]
    assert preflight["passed"], output
    assert [fact["rank"] for fact in ranks] == list(range(len(hosts)))
    assert {fact["world_size"] for fact in ranks} == {len(hosts)}
    assert {fact["launcher"] for fact in ranks} == {launcher}
    assert sorted(fact["host"] for fact in ranks) == hosts
    nodes = len(set(hosts))
    assert f"scaletrain: {len(hosts)} process(es) on {nodes} node{'s' * (nodes > 1)} via" in output
    summary = json.loads((folder.metrics / "summary.json").read_text())
    assert summary["test_accuracy"] > 0.5, output  # 10 classes: chance is 0.1
    history = [json.loads(line) for line in folder.metrics.joinpath("train.jsonl").open()]
    assert history[-1]["loss"] < history[0]["loss"]


@pytest.mark.multiprocess
@pytest.mark.parametrize(
    ("mode", "nodes", "launcher"),
    [("torchrun", 1, "torchrun"), ("torchrun", 2, "torchrun"), ("srun", 2, "slurm")],
)
def test_mnist_example_trains_on_every_rank(
    slurm_cluster: SlurmCluster,
    tmp_path: Path,
    mnist_data: Path,
    mode: str,
    nodes: int,
    launcher: str,
) -> None:
    environ = job_environ(slurm_cluster, tmp_path)
    name = f"mnist-{mode}-{nodes}"
    arguments = ["--mode", mode, "--nodes", str(nodes), "--gpus-per-node", "2", "--name", name]
    folder, job_id = submit(
        slurm_cluster,
        tmp_path,
        environ,
        *arguments,
        str(EXAMPLE),
        "--data-dir",
        str(mnist_data),
        "--epochs",
        "1",
    )
    output = finished(slurm_cluster, folder, job_id)
    hosts = sorted(["n1", "n2"][:nodes] * 2)
    check_mnist_trained(folder, output, launcher, hosts)
    # What was submitted is kept: the script as submitted and the plan beside it.
    assert folder.job_script.read_text().startswith("#!/bin/bash\n")
    assert f"--nodes={nodes}" in folder.plan.read_text()
    assert [event.event for event in read_job_events(folder)] == ["submitted"]


@pytest.mark.multiprocess
def test_accelerate_machine_rank_is_each_nodes_own(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    environ = job_environ(slurm_cluster, tmp_path, PROBE_DIR=str(tmp_path))
    arguments = ("--run", "x", "$(touch pwned)", "two words")
    folder, job_id = submit(
        slurm_cluster,
        tmp_path,
        environ,
        "--mode",
        "accelerate",
        "--nodes",
        "2",
        "--gpus-per-node",
        "2",
        "--name",
        "acc",
        str(WORKERS / "accelerate_ranks.py"),
        *arguments,
    )
    output = finished(slurm_cluster, folder, job_id)
    ranks = reports(tmp_path, "rank-*.json")
    assert [rank["rank"] for rank in ranks] == [0, 1, 2, 3], output
    # $SLURM_NODEID evaluated on each node: node n1 is machine 0, n2 machine 1. Evaluated in
    # the batch shell, both would claim machine 0 and the rendezvous would not complete.
    assert [(rank["host"], rank["machine_rank"]) for rank in ranks] == [
        ("n1", 0), ("n1", 0), ("n2", 1), ("n2", 1),
    ]  # fmt: skip
    for rank in ranks:
        assert rank["world_size"] == 4 and rank["total_of_rank_plus_one"] == 10.0
        assert rank["distributed_type"] == "DistributedType.MULTI_CPU"
        assert rank["argv"] == list(arguments)  # untouched by accelerate's parser and the shell
    assert not list(tmp_path.rglob("pwned"))
    assert json.loads((folder.report / "preflight.json").read_text())["passed"]


@pytest.mark.multiprocess
def test_lightning_finds_every_rank_through_slurm(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    environ = job_environ(slurm_cluster, tmp_path, PROBE_DIR=str(tmp_path))
    folder, job_id = submit(
        slurm_cluster,
        tmp_path,
        environ,
        "--mode",
        "lightning",
        "--nodes",
        "2",
        "--gpus-per-node",
        "2",
        "--name",
        "lit",
        "--no-check",
        str(WORKERS / "lightning_ranks.py"),
        "--devices",
        "2",
        "--nodes",
        "2",
    )
    output = finished(slurm_cluster, folder, job_id)
    ranks = reports(tmp_path, "rank-*.json")
    assert [(r["rank"], r["local_rank"], r["node_rank"], r["host"]) for r in ranks] == [
        (0, 0, 0, "n1"), (1, 1, 0, "n1"), (2, 0, 1, "n2"), (3, 1, 1, "n2"),
    ], output  # fmt: skip
    for rank in ranks:
        assert rank["cluster_environment"] == "SLURMEnvironment"  # Lightning's own detection
        assert (rank["world_size"], rank["steps"]) == (4, 4)
        assert rank["weights"] == ranks[0]["weights"]  # gradients were averaged over ranks


@pytest.mark.multiprocess
def test_deepspeed_one_task_per_gpu_from_slurm_variables(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    config = tmp_path / "ds_config.json"
    config.write_text(
        json.dumps(
            {
                "train_micro_batch_size_per_gpu": 8,
                "optimizer": {"type": "SGD", "params": {"lr": 0.1}},
            }
        )
    )
    environ = job_environ(slurm_cluster, tmp_path, PROBE_DIR=str(tmp_path))
    folder, job_id = submit(
        slurm_cluster,
        tmp_path,
        environ,
        "--mode",
        "deepspeed",
        "--nodes",
        "2",
        "--gpus-per-node",
        "2",
        "--name",
        "ds",
        "--no-check",
        str(WORKERS / "deepspeed_ranks.py"),
        "--deepspeed",
        "--deepspeed_config",
        str(config),
    )
    output = finished(slurm_cluster, folder, job_id)
    ranks = reports(tmp_path, "rank-*.json")
    assert [(r["rank"], r["local_rank"], r["host"]) for r in ranks] == [
        (0, 0, "n1"), (1, 1, "n1"), (2, 0, "n2"), (3, 1, "n2"),
    ], output  # fmt: skip
    for rank in ranks:
        assert rank["world_size"] == 4
        assert rank["weights"] == ranks[0]["weights"]  # different data, averaged gradients


def test_hostile_paths_and_arguments_arrive_as_given(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """A folder, a script name and arguments that would run commands if the job script let
    the shell read them: each must arrive as one word, and nothing may run."""
    project = tmp_path / "my project 'x' $(touch pwned1)"
    project.mkdir()
    script = project / "probe `touch pwned2`.py"
    script.write_text((WORKERS / "task_probe.py").read_text())
    arguments = [
        "$(touch pwned3)",
        "`touch pwned4`",
        "'; touch pwned5; '",
        '"; touch pwned6"',
        "two\nlines",
        "$HOME",
        "--name",
        "-- x",
    ]
    environ = job_environ(slurm_cluster, tmp_path, PROBE_DIR=str(tmp_path))
    folder, job_id = submit(
        slurm_cluster,
        project,
        environ,
        "--mode",
        "srun",
        "--nodes",
        "2",
        "--gpus-per-node",
        "1",
        "--name",
        "quoted",
        "--no-check",
        script.name,
        *arguments,
    )
    finished(slurm_cluster, folder, job_id)
    tasks = reports(tmp_path, "task-*.json")
    assert len(tasks) == 2
    for task in tasks:
        assert task["argv"] == arguments
        assert (task["script"], task["cwd"]) == (script.name, str(project))
        assert task["environ"]["SCALETRAIN_RUN_DIR"] == str(folder.root)
    assert not list(tmp_path.rglob("pwned*"))


def test_per_task_values_are_evaluated_in_each_task(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """LUMI's per-task lines, run for real: a job planned for the local cluster as if its
    nodes had AMD GPUs. Each task must see its own GCD and a MIOpen cache of its own node."""
    plan = dataclasses.replace(
        plan_for(
            cluster="local",
            mode="srun",
            nodes=2,
            gpus_per_node=2,
            time="10:00",
            script=str(WORKERS / "task_probe.py"),
        ),
        accelerator="amd",
    )
    folder = RunFolder(tmp_path / "runs" / "amd")
    script = render_job_script(plan, folder, JobOptions(workdir=tmp_path, preflight=False))
    user = f"scaletrain-test-{os.getpid()}"  # a MIOpen folder name no one else uses
    environ = job_environ(slurm_cluster, tmp_path, PROBE_DIR=str(tmp_path), USER=user)
    try:
        job_id = submit_job(plan, folder, script, environ)
        finished(slurm_cluster, folder, job_id)
        tasks = reports(tmp_path, "task-*.json")
        seen = [
            (task["host"], task["environ"]["ROCR_VISIBLE_DEVICES"],
             task["environ"]["MIOPEN_USER_DB_PATH"], task["miopen_folder_exists"])
            for task in sorted(tasks, key=lambda task: int(task["environ"]["SLURM_PROCID"]))
        ]  # fmt: skip
        cache = f"/tmp/{user}-miopen-cache-"
        assert seen == [
            ("n1", "0", f"{cache}0", True), ("n1", "1", f"{cache}0", True),
            ("n2", "0", f"{cache}1", True), ("n2", "1", f"{cache}1", True),
        ]  # fmt: skip
        assert {task["environ"]["MASTER_ADDR"] for task in tasks} == {"n1"}
    finally:
        for node in (0, 1):
            Path(f"/tmp/{user}-miopen-cache-{node}").rmdir()


def test_graceful_stop_requeues_and_the_rerun_continues(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """The job script's side of the graceful-stop handshake, with a worker doing the training
    side: USR1 -> stop-requested -> stopped.json -> requeue -> the rerun with restart count 1."""
    environ = job_environ(slurm_cluster, tmp_path)
    folder, job_id = submit(
        slurm_cluster,
        tmp_path,
        environ,
        "--mode",
        "srun",
        "--nodes",
        "1",
        "--gpus-per-node",
        "1",
        "--name",
        "stopper",
        "--no-check",
        str(WORKERS / "graceful_stop.py"),
    )
    started = folder.root / "training-started"
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not started.exists():
        assert time.monotonic() < deadline, slurm_cluster.logs()
        time.sleep(0.2)
    # What Slurm sends before the time limit (--signal=B:USR1@...), delivered now.
    slurm.cancel(job_id, environ=environ, signal="USR1", batch_only=True)
    output = finished(slurm_cluster, folder, job_id)
    assert (folder.root / "runs.txt").read_text().splitlines() == [
        "first run: stopped after a stop request: True",
        "restart 1: resumed and finished",
    ]
    events = read_job_events(folder)
    assert [(event.event, event.job_id) for event in events] == [
        ("submitted", job_id), ("requeued", job_id),
    ]  # fmt: skip
    assert events[1].details == {"restart_count": 1}
    # One log for both runs (--open-mode=append): the first run's lines were kept.
    assert "USR1 received: asking training to checkpoint and stop" in output
    assert "requeueing job" in output and "stopped at step 7" in output
    status = json.loads(
        scaletrain("status", "--json", "stopper", cwd=tmp_path, environ=environ).stdout
    )
    assert (status["state"], status["restarts"]) == ("COMPLETED", 1)


def test_a_stop_marker_of_an_earlier_job_does_not_requeue(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    # As a crash before the training could clear it would leave it.
    stale = tmp_path / "runs" / "stale" / "stopped.json"
    stale.parent.mkdir(parents=True)
    stale.write_text(json.dumps({"step": 3, "reason": "stop: SIGTERM"}))
    environ = job_environ(slurm_cluster, tmp_path, PROBE_DIR=str(tmp_path))
    folder, job_id = submit(
        slurm_cluster, tmp_path, environ, "--mode", "srun", "--gpus", "1", "--name", "stale",
        "--no-check", str(WORKERS / "task_probe.py"),
    )  # fmt: skip
    output = finished(slurm_cluster, folder, job_id)
    assert "requeue" not in output
    assert [event.event for event in read_job_events(folder)] == ["submitted"]
    assert stale.is_file()  # left for the training to read and clear when it resumes


def test_a_run_continues_under_its_name_but_not_twice_at_once(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    environ = job_environ(
        slurm_cluster, tmp_path, PROBE_DIR=str(tmp_path), PROBE_WAIT_FOR=str(release)
    )
    arguments = [
        "--mode",
        "srun",
        "--gpus",
        "1",
        "--name",
        "again",
        "--no-check",
        str(WORKERS / "task_probe.py"),
    ]
    folder, first = submit(slurm_cluster, tmp_path, environ, *arguments)
    busy = scaletrain(
        "submit", "-c", "local", "-t", "10:00", *arguments, cwd=tmp_path, environ=environ
    )
    assert busy.returncode == 2
    assert f"Run 'again' still has job {first}" in busy.stderr
    assert "scaletrain cancel again" in busy.stderr
    release.touch()
    finished(slurm_cluster, folder, first)
    _, second = submit(slurm_cluster, tmp_path, environ, *arguments)
    finished(slurm_cluster, folder, second)
    submitted = [event.job_id for event in read_job_events(folder) if event.event == "submitted"]
    assert submitted == [first, second]
    assert sorted(path.name for path in folder.logs.iterdir()) == sorted(
        [f"again-{first}.out", f"again-{second}.out"]
    )


def test_sbatch_refusing_the_job_shows_its_message(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    # A profile whose partition this cluster does not have: sbatch itself says no.
    profiles = tmp_path / "config" / "scaletrain" / "clusters"
    profiles.mkdir(parents=True)
    local = (REPO / "src/scaletrain/clusters/profiles/local.toml").read_text()
    profiles.joinpath("elsewhere.toml").write_text(
        local.replace("partitions.debug", "partitions.gpu")
    )
    environ = job_environ(slurm_cluster, tmp_path)
    result = scaletrain(
        "submit",
        "-c",
        "elsewhere",
        "-t",
        "10:00",
        "--gpus",
        "1",
        "--name",
        "no",
        str(WORKERS / "task_probe.py"),
        cwd=tmp_path,
        environ=environ,
    )
    assert result.returncode == 2
    assert "`sbatch --parsable" in result.stderr
    assert "Invalid partition name specified" in result.stderr
    assert "HINT:" in result.stderr
    assert not (tmp_path / "runs" / "no" / "jobs.jsonl").exists()


def final_weights(folder: RunFolder) -> dict[str, Any]:
    """The model's weights in the run's newest checkpoint (DCP, read without a process group)."""
    import torch
    from torch.distributed.checkpoint.format_utils import dcp_to_torch_save

    latest = folder.checkpoints / (folder.checkpoints / "LATEST").read_text().strip()
    converted = folder.root / "final.pt"
    dcp_to_torch_save(latest, converted)
    state = torch.load(converted, weights_only=False)
    return {name: value for name, value in state["model"].items()}


@pytest.mark.multiprocess
def test_mnist_stopped_before_its_time_limit_requeues_resumes_and_matches(
    slurm_cluster: SlurmCluster, tmp_path: Path, mnist_data: Path
) -> None:
    """Fault test 3: USR1 mid-run -> checkpoint, requeue, resume; the same weights as a run
    that was never interrupted. Needs the checkpoint runtime (st.Checkpointer in the example)."""
    pytest.importorskip("scaletrain.checkpoint", reason="no checkpoint runtime in this tree yet")
    import torch

    environ = job_environ(slurm_cluster, tmp_path)
    shape = ["--mode", "srun", "--nodes", "2", "--gpus-per-node", "1", "--no-check"]
    example = [str(EXAMPLE), "--data-dir", str(mnist_data), "--epochs", "16"]
    straight, straight_job = submit(slurm_cluster, tmp_path, environ, *shape, "--name",
                                    "straight", *example)  # fmt: skip
    stopped, stopped_job = submit(slurm_cluster, tmp_path, environ, *shape, "--name", "stopped",
                                  *example)  # fmt: skip
    history = stopped.metrics / "train.jsonl"
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while not (history.is_file() and len(history.read_text().splitlines()) >= 3):
        assert time.monotonic() < deadline, slurm_cluster.logs()
        time.sleep(0.2)
    # What Slurm sends before the time limit (--signal=B:USR1@...), delivered now.
    slurm.cancel(stopped_job, environ=environ, signal="USR1", batch_only=True)
    output = finished(slurm_cluster, stopped, stopped_job)
    finished(slurm_cluster, straight, straight_job)

    events = read_job_events(stopped)
    assert [(event.event, event.job_id) for event in events] == [
        ("submitted", stopped_job), ("requeued", stopped_job),
    ], output  # fmt: skip
    resumes = [json.loads(line) for line in (stopped.root / "resumes.jsonl").open()]
    assert len(resumes) == 1, output
    assert resumes[0]["after_stop"] == "stop-requested"
    assert str(resumes[0]["slurm_restart_count"]) == "1"  # the requeued run saw it
    assert "USR1 received" in output and "requeueing job" in output
    expected, resumed = final_weights(straight), final_weights(stopped)
    assert expected.keys() == resumed.keys()
    assert all(torch.equal(expected[name], resumed[name]) for name in expected)
