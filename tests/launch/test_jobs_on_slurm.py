"""Generated jobs on the real 2-node test Slurm: `scaletrain submit` for every launch mode whose
tool installs here, each rank checked, output in the run folder; quoting and per-task values
for real. Stop, requeue and continuing a run: test_requeue_on_slurm.py."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
from pathlib import Path

import pytest

from scaletrain.clusters.catalog import load_profile
from scaletrain.core.run_folder import RunFolder
from scaletrain.launch.job_script import JobOptions, render_job_script
from scaletrain.launch.prepare import PreparedJob
from scaletrain.launch.script_decisions import recovery
from scaletrain.launch.submission import submit_job
from scaletrain.planning.modes import launch_modes
from scaletrain.planning.script_facts import read_script_facts
from scaletrain.slurm.history import read_job_events
from tests.conftest import REPO, WORKERS, scaletrain
from tests.support.job_scripts import HOSTILE_PROFILE_VALUE, hostile_site, plan_for
from tests.support.slurm_cluster import SlurmCluster
from tests.support.slurm_jobs import (
    EXAMPLE,
    finished,
    job_environ,
    reports,
    submit,
    submit_options,
)

pytestmark = pytest.mark.slurm


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
    options = submit_options(f"mnist-{mode}-{nodes}", mode, nodes, 2)
    command = (str(EXAMPLE), "--data-dir", str(mnist_data), "--epochs", "1")
    folder, job_id = submit(slurm_cluster, tmp_path, environ, options, *command)
    output = finished(slurm_cluster, folder, job_id)
    hosts = sorted(["n1", "n2"][:nodes] * 2)
    check_mnist_trained(folder, output, launcher, hosts)
    # What was submitted is kept: the script as submitted and the plan beside it.
    assert folder.job_script.read_text().startswith("#!/bin/bash\n")
    assert f"\n#SBATCH --nodes={nodes}\n" in folder.job_script.read_text()
    assert f"\nnodes = {nodes}\n" in folder.plan.read_text()
    assert [event.event for event in read_job_events(folder)] == ["submitted"]


@pytest.mark.multiprocess
def test_accelerate_machine_rank_is_each_nodes_own(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    environ = job_environ(slurm_cluster, tmp_path, PROBE_DIR=str(tmp_path))
    arguments = ("--run", "x", "$(touch pwned)", "two words")
    options = submit_options("acc", "accelerate", 2, 2)
    command = (str(WORKERS / "accelerate_ranks.py"), *arguments)
    folder, job_id = submit(slurm_cluster, tmp_path, environ, options, *command)
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
    options = submit_options("lit", "lightning", 2, 2)
    # As in CSC's example: the script gets GPUs per node and nodes, and gives them to Trainer.
    # `--nodes` is also submit's own option: after `--` it is the script's on purpose.
    command = (str(WORKERS / "lightning_ranks.py"), "--", "--devices", "2", "--nodes", "2")
    folder, job_id = submit(slurm_cluster, tmp_path, environ, options, *command)
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
    options = submit_options("ds", "deepspeed", 2, 2)
    command = (
        str(WORKERS / "deepspeed_ranks.py"),
        "--deepspeed",
        "--deepspeed_config",
        str(config),
    )
    folder, job_id = submit(slurm_cluster, tmp_path, environ, options, *command)
    output = finished(slurm_cluster, folder, job_id)
    ranks = reports(tmp_path, "rank-*.json")
    assert [(r["rank"], r["local_rank"], r["host"]) for r in ranks] == [
        (0, 0, "n1"), (1, 1, "n1"), (2, 0, "n2"), (3, 1, "n2"),
    ], output  # fmt: skip
    for rank in ranks:
        assert rank["world_size"] == 4
        assert rank["weights"] == ranks[0]["weights"]  # different data, averaged gradients
        # --local_rank as deepspeed's launcher passes it, so the script prints on each node.
        assert rank["local_rank_argument"] == rank["local_rank"]
    assert "node n1: trained" in output and "node n2: trained" in output


@pytest.mark.multiprocess
@pytest.mark.parametrize("mode", sorted(launch_modes()))
def test_hostile_paths_and_arguments_arrive_as_given(
    slurm_cluster: SlurmCluster, tmp_path: Path, mode: str
) -> None:
    """A folder, a script name, arguments and a profile's exported value that would run
    commands if the job script let the shell read them: in every launch mode, on 2 nodes,
    each must arrive as one word, and nothing may run."""
    project = tmp_path / "my project 'x' $(touch pwned1)"
    project.mkdir()
    script = project / "probe `touch pwned2`.py"
    script.write_text((WORKERS / "argv_probe.py").read_text())
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
    probes = tmp_path / "probes"
    probes.mkdir()
    environ = job_environ(slurm_cluster, tmp_path, PROBE_OUT=str(probes))
    hostile_site(tmp_path / "config")
    # DeepSpeed's --local_rank, asked for: the probe takes its arguments unparsed.
    local_rank = ["--local-rank-arg", "yes"] if mode == "deepspeed" else []
    options = submit_options("quoted", mode, 2, 1, "--no-check", *local_rank, cluster="hostile")
    # After `--`, also options named like submit's own (--name) are the script's.
    folder, job_id = submit(slurm_cluster, project, environ, options, script.name, "--", *arguments)
    output = finished(slurm_cluster, folder, job_id)
    processes = [json.loads(path.read_text()) for path in probes.glob("*.json")]
    assert len(processes) == 2, output
    for process in processes:
        assert Path(process["argv"][0]).name == script.name
        # DeepSpeed's launcher passes each process its local rank first; so does its mode.
        first = (
            [f"--local_rank={process['environ']['SLURM_LOCALID']}"] if mode == "deepspeed" else []
        )
        assert process["argv"][1:] == [*first, *arguments]
        assert process["cwd"] == str(project)
        assert process["environ"]["SCALETRAIN_RUN_DIR"] == str(folder.root)
        assert process["environ"]["HOSTILE_VALUE"] == HOSTILE_PROFILE_VALUE
    assert sorted(process["environ"]["SLURMD_NODENAME"] for process in processes) == ["n1", "n2"]
    assert not list(tmp_path.rglob("pwned*"))


def test_per_task_values_are_evaluated_in_each_task(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """LUMI's per-task lines, run for real: a job planned for the local cluster as if its
    nodes had AMD GPUs. Each task must see its own GCD and a MIOpen cache of its own node."""
    local = plan_for(
        cluster="local",
        mode="srun",
        nodes=2,
        gpus_per_node=2,
        time="10:00",
        script=str(WORKERS / "task_probe.py"),
        visible_gpus="own",  # seed 003's select_gpu: one GCD per task
    )
    lumi = load_profile("lumi", {}).software.task_setup
    plan = dataclasses.replace(
        local,
        accelerator="amd",
        software=dataclasses.replace(local.software, task_setup=lumi, venv=sys.prefix),
    )
    folder = RunFolder(tmp_path / "runs" / "amd")
    script = render_job_script(plan, folder, JobOptions(workdir=tmp_path, preflight=False))
    user = f"scaletrain-test-{os.getpid()}"  # a MIOpen folder name no one else uses
    environ = job_environ(slurm_cluster, tmp_path, PROBE_DIR=str(tmp_path), USER=user)
    try:
        facts = read_script_facts(WORKERS / "task_probe.py")
        recovered = recovery(facts, max_restarts=0, requeue=False)
        job_id = submit_job(PreparedJob(plan, script, facts, recovered), folder, environ)
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


def test_sbatch_refusing_the_job_shows_its_message_and_the_fixed_command_works(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    # A profile whose partition this cluster does not have: sbatch itself says no.
    profiles = tmp_path / "config" / "scaletrain" / "clusters"
    profiles.mkdir(parents=True)
    local = (REPO / "src/scaletrain/clusters/profiles/local.toml").read_text()
    profiles.joinpath("elsewhere.toml").write_text(
        local.replace("partitions.debug", "partitions.gpu")
    )
    environ = job_environ(slurm_cluster, tmp_path, PROBE_DIR=str(tmp_path))
    options = submit_options("no", "srun", 1, 1, cluster="elsewhere")
    probe = str(WORKERS / "task_probe.py")
    result = scaletrain("submit", *options, probe, cwd=tmp_path, environ=environ)
    assert result.returncode == 2
    assert "`sbatch --parsable" in result.stderr
    assert "Invalid partition name specified" in result.stderr
    assert "HINT:" in result.stderr
    # Nothing of the refused submission is left (no plan.toml to differ from the next one)...
    assert not (tmp_path / "runs" / "no").exists()
    # ...so the corrected command with the same name just works.
    fixed = submit_options("no", "srun", 1, 1, "--no-check", cluster="local")
    folder, job_id = submit(slurm_cluster, tmp_path, environ, fixed, probe)
    assert slurm_cluster.wait_for_job(job_id) == "COMPLETED"
    assert [event.job_id for event in read_job_events(folder)] == [job_id]
