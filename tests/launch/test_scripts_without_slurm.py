"""Every launch mode's job script, run by bash without Slurm: hostile values arrive intact.

A recording stand-in for srun and scontrol (tests/support/fake_slurm.py) starts each task
command as a real srun would; the "training script" records the argv and environment it got.
The launchers in between (torchrun, accelerate) are the real ones. The same hostile values
go through the real test Slurm in test_jobs_on_slurm.py.
"""

from __future__ import annotations

import json
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest

from scaletrain.clusters.catalog import load_profile
from scaletrain.core.run_folder import RunFolder
from scaletrain.launch.job_programs import write_job_programs
from scaletrain.planning.modes import launch_modes
from scaletrain.planning.planner import plan_job
from scaletrain.planning.request import Request
from scaletrain.planning.script_facts import read_script_facts
from scaletrain.runtime.launchers import detect_layout
from tests.conftest import WORKERS, clean_environ, kill_session
from tests.launch.test_render_quoting import HOSTILE_ARGUMENTS
from tests.support import fake_slurm
from tests.support.job_scripts import HOSTILE_PROFILE_VALUE, hostile_site, render

pytestmark = pytest.mark.multiprocess

SCRIPT_NAME = "my $(touch pwned10) `x`.py"
PROCESSES = 2
# The batch shell and every task it starts end within this many seconds.
JOB_TIMEOUT_S = 240


def run_without_slurm(
    tmp_path: Path, mode: str, script_tail: str = "", accelerator: str = "cpu"
) -> dict[str, Any]:
    """Render `mode`'s job for 2 processes with hostile values, run it; what it did. The script
    is the probe with `script_tail` after it (what `submit` reads in the script, never run);
    on an `accelerator` other than cpu the processes still run on CPUs."""
    workdir = tmp_path / "project 'pwned11' $(touch pwned12)"
    workdir.mkdir()
    probe = (WORKERS / "argv_probe.py").read_text()
    (workdir / SCRIPT_NAME).write_text(f"{probe}\n{script_tail}")
    hostile_site(tmp_path / "config", accelerator=accelerator)
    profile = load_profile("hostile", {"XDG_CONFIG_HOME": str(tmp_path / "config")})
    request = Request(
        cluster="hostile",
        script=SCRIPT_NAME,
        script_args=HOSTILE_ARGUMENTS,
        time="1:00:00",
        gpus=PROCESSES,
        mode=mode,
        script_facts=read_script_facts(workdir / SCRIPT_NAME),
    )
    plan = plan_job(request, profile)
    folder = RunFolder(workdir / "runs; touch pwned13" / "mnist")
    script = render(plan, folder=folder, workdir=workdir, preflight=False)
    write_job_programs(folder.programs)  # as submit does
    job = tmp_path / "job.sbatch"
    job.write_text(script)
    out, log = tmp_path / "probe", tmp_path / "fake-slurm.jsonl"
    out.mkdir()
    job_tmp = tmp_path / "job-tmp"
    job_tmp.mkdir()
    job_id = random.randrange(10**6, 10**7)  # its port (20000 + id % 10000) differs per run
    environ = clean_environ(
        **fake_slurm.batch_environment(script, job_id=job_id, nodelist="localhost"),
        **fake_slurm.install(tmp_path / "bin", log),
        PROBE_OUT=str(out),
        # A job's own temporary folder, as Slurm sites give one per job and remove after it:
        # torchrun leaves its torchelastic_* folder there.
        TMPDIR=str(job_tmp),
    )
    # A session of its own, so that a timeout ends the tasks and launchers the job started too.
    batch = subprocess.Popen(
        ["bash", str(job)],
        cwd=tmp_path,
        env=environ,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = batch.communicate(timeout=JOB_TIMEOUT_S)
    finally:
        kill_session(batch)
    return {
        "exit_code": batch.returncode,
        "output": output,
        "job_id": job_id,
        "workdir": workdir,
        "processes": [json.loads(path.read_text()) for path in sorted(out.glob("*.json"))],
        "calls": [json.loads(line) for line in log.read_text().splitlines()],
    }


# What a DeepSpeed script's parser looks like when it takes the launcher's --local_rank.
TAKES_LOCAL_RANK = """
def arguments():  # never called here: the parser of a DeepSpeed script (CSC's shape)
    import argparse
    parser = argparse.ArgumentParser()
    parser.add_argument("--local_rank", type=int, default=-1)
"""


@pytest.mark.parametrize("mode", sorted(launch_modes()))
def test_each_mode_runs_without_slurm_and_passes_hostile_values_as_one_word_each(
    mode: str, tmp_path: Path
) -> None:
    job = run_without_slurm(tmp_path, mode, TAKES_LOCAL_RANK if mode == "deepspeed" else "")
    assert job["exit_code"] == 0, job["output"][-3000:]
    assert not list(tmp_path.rglob("pwned*")), "a hostile value ran as a command"
    srun_calls = [call["argv"] for call in job["calls"] if call["command"] == "srun"]
    assert len(srun_calls) == 1 and srun_calls[0][0] == "--kill-on-bad-exit=1"
    processes = job["processes"]
    assert len(processes) == PROCESSES, job["output"][-3000:]
    for process in processes:
        # Exactly the arguments given, each one word, to the script given, in the folder given.
        assert Path(process["argv"][0]).name == SCRIPT_NAME
        # DeepSpeed's launcher passes each process its local rank first; so does its mode.
        first = (
            [f"--local_rank={process['environ']['SLURM_LOCALID']}"] if mode == "deepspeed" else []
        )
        assert process["argv"][1:] == [*first, *HOSTILE_ARGUMENTS]
        assert Path(process["cwd"]) == job["workdir"]
        assert process["environ"]["HOSTILE_VALUE"] == HOSTILE_PROFILE_VALUE
        assert process["environ"]["SCALETRAIN_RUN_DIR"] == str(
            job["workdir"] / "runs; touch pwned13" / "mnist"
        )
    check_ranks(mode, job)


def check_ranks(mode: str, job: dict[str, Any]) -> None:
    """Each process's rank variables, as its launcher defines them."""
    tasks = [process["environ"] for process in job["processes"]]
    if launch_modes()[mode].tasks_per_node == "one":
        # One Slurm task; its launcher starts every process of the node (torchrun's RANK).
        assert sorted(task["RANK"] for task in tasks) == ["0", "1"]
        assert {task["SLURM_PROCID"] for task in tasks} == {"0"}
        return
    # One Slurm task per process: SLURM_PROCID counts them, and the port rule of
    # docs/slurm-jobs.md (20000 + job id mod 10000) holds in the batch shell's MASTER_PORT
    # and in the runtime's own fallback for tasks started without MASTER_PORT.
    assert sorted(task["SLURM_PROCID"] for task in tasks) == ["0", "1"]
    expected_port = 20000 + job["job_id"] % 10000
    torch_variables = {"MASTER_PORT", "MASTER_ADDR", "RANK", "LOCAL_RANK", "WORLD_SIZE"}
    torch_variables.add("LOCAL_WORLD_SIZE")
    for task in tasks:
        assert (task["MASTER_ADDR"], int(task["MASTER_PORT"])) == ("localhost", expected_port)
        slurm_only = {k: v for k, v in task.items() if k not in torch_variables}
        layout = detect_layout(slurm_only)
        assert (layout.launcher, layout.master_port) == ("slurm", expected_port)
        assert (layout.rank, layout.world_size) == (int(task["SLURM_PROCID"]), PROCESSES)
        if mode == "deepspeed":
            # torch's variables, from this task's own SLURM_* values (not the batch shell's).
            assert (task["RANK"], task["LOCAL_RANK"]) == (
                task["SLURM_PROCID"],
                task["SLURM_LOCALID"],
            )
            assert (task["WORLD_SIZE"], task["LOCAL_WORLD_SIZE"]) == ("2", "2")


# The two ways scripts choose their GPU (planning/script_launch.py), written as the LUMI AI
# guide and seed 003 write them; never run here (the processes are CPU probes).
SET_DEVICE_BY_LOCAL_RANK = """
def choose_device():  # never called here
    import torch
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
"""
CUDA_ZERO = """
def choose_device():  # never called here: each task sees one GPU (seed 003's select_gpu)
    import torch
    return torch.device("cuda:0")
"""


@pytest.mark.parametrize("shape", ["set_device(LOCAL_RANK)", "cuda:0"])
def test_each_task_sees_the_gpus_its_script_expects(shape: str, tmp_path: Path) -> None:
    """srun mode on AMD GPUs, 2 tasks on a node: the devices a task sees and the local rank it
    is told agree with the script's way of choosing, or local rank 1 is an invalid ordinal."""
    by_local_rank = shape == "set_device(LOCAL_RANK)"
    tail = SET_DEVICE_BY_LOCAL_RANK if by_local_rank else CUDA_ZERO
    job = run_without_slurm(tmp_path, "srun", tail, accelerator="amd")
    assert job["exit_code"] == 0, job["output"][-3000:]
    tasks = sorted((p["environ"] for p in job["processes"]), key=lambda e: e["LOCAL_RANK"])
    assert [task["LOCAL_RANK"] for task in tasks] == ["0", "1"]
    for task in tasks:
        if by_local_rank:
            # Every GCD of the node: set_device(LOCAL_RANK) finds its own.
            assert "ROCR_VISIBLE_DEVICES" not in task
        else:
            # Only its own GCD, which is cuda:0 in the task.
            assert task["ROCR_VISIBLE_DEVICES"] == task["SLURM_LOCALID"]


def test_deepspeed_passes_no_local_rank_to_a_script_whose_parser_lacks_it(tmp_path: Path) -> None:
    """The LUMI AI guide's DeepSpeed script: argparse with deepspeed.add_config_arguments only,
    which stops at an unknown --local_rank (exit 2) on every rank."""
    parser_without = """
def arguments():  # never called here: argparse with DeepSpeed's config options only
    import argparse
    return argparse.ArgumentParser()
"""
    job = run_without_slurm(tmp_path, "deepspeed", parser_without)
    assert job["exit_code"] == 0, job["output"][-3000:]
    for process in job["processes"]:
        assert process["argv"][1:] == list(HOSTILE_ARGUMENTS)
