"""`scaletrain clusters detect`: a draft profile from what Slurm says, on a GPU site and for
real on the local multi-node Slurm."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scaletrain.clusters.catalog import profile_from_text
from scaletrain.clusters.detect import draft_profile
from scaletrain.launch.job_script import resource_options
from scaletrain.planning.planner import plan_job
from scaletrain.planning.request import Request
from scaletrain.slurm.output import node_from_fields, parse_key_values, partition_from_fields
from tests.conftest import scaletrain
from tests.support.slurm_cluster import SlurmCluster

# `scontrol show node -o` / `show partition -o` as a V100 site like Puhti prints them
# (abridged: fields the detector does not read are left out).
GPU_SITE_NODES = [
    "NodeName=r01g01 Arch=x86_64 CoresPerSocket=20 CPUAlloc=0 CPUTot=40 CPULoad=0.01 "
    "AvailableFeatures=nvme ActiveFeatures=nvme Gres=gpu:v100:4(S:0-1),nvme:3600 "
    "NodeAddr=r01g01 RealMemory=382000 State=IDLE Partitions=gpu,gputest",
    "NodeName=r01g02 Arch=x86_64 CoresPerSocket=20 CPUAlloc=40 CPUTot=40 CPULoad=39.5 "
    "AvailableFeatures=nvme ActiveFeatures=nvme Gres=gpu:v100:4(S:0-1),nvme:3600 "
    "NodeAddr=r01g02 RealMemory=382000 State=ALLOCATED Partitions=gpu,gputest",
    "NodeName=r01c01 Arch=x86_64 CoresPerSocket=20 CPUAlloc=0 CPUTot=40 CPULoad=0.00 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=(null) NodeAddr=r01c01 "
    "RealMemory=190000 State=IDLE Partitions=small,large",
]
GPU_SITE_PARTITIONS = [
    "PartitionName=gpu AllowGroups=ALL Default=NO MaxNodes=20 MaxTime=3-00:00:00 "
    "Nodes=r01g[01-02] State=UP TotalCPUs=80 TotalNodes=2 DefaultTime=NONE",
    "PartitionName=gputest AllowGroups=ALL Default=NO MaxNodes=2 MaxTime=00:15:00 "
    "Nodes=r01g[01-02] State=UP TotalCPUs=80 TotalNodes=2 DefaultTime=NONE",
    "PartitionName=small AllowGroups=ALL Default=YES MaxNodes=1 MaxTime=3-00:00:00 "
    "Nodes=r01c01 State=UP TotalCPUs=40 TotalNodes=1 DefaultTime=NONE",
]


def test_gpu_site_draft_describes_its_gpu_nodes_and_leaves_cpu_partitions_out() -> None:
    nodes = [node_from_fields(parse_key_values(line)) for line in GPU_SITE_NODES]
    partitions = [partition_from_fields(parse_key_values(line)) for line in GPU_SITE_PARTITIONS]
    draft = draft_profile("mysite", partitions, nodes)
    profile = profile_from_text("mysite", draft.text, where="draft")
    assert (profile.node.gpus, profile.node.usable_cores, profile.node.accelerator) == (
        4,
        40,
        "nvidia",
    )
    assert profile.node.usable_memory_gb == 373  # 382000 MB
    assert profile.slurm.gpu_request == "--gres=gpu:v100:{gpus}"
    assert (profile.default_per_gpu.cores, profile.default_per_gpu.memory_gb) == (10, 93)
    assert list(profile.partitions) == ["gpu", "gputest"]
    assert profile.partitions["gputest"].max_time == "00:15:00"
    assert profile.partitions["gpu"].max_nodes == 20
    assert draft.skipped == ("small (40 cores, 185 GB, no GPUs)",)
    assert "CHECK" in draft.text  # what Slurm cannot tell is marked for the user
    # The draft is usable as it is: it plans a 2-node job with the site's GPU syntax.
    plan = plan_job(Request(cluster="mysite", gpus=8, time="1:00:00", script="t.py"), profile)
    assert "--gres=gpu:v100:4" in resource_options(plan) and plan.nodes == 2


def test_amd_gpu_type_is_recognised() -> None:
    line = GPU_SITE_NODES[0].replace("gpu:v100:4(S:0-1)", "gpu:mi250:8")
    nodes = [node_from_fields(parse_key_values(line))]
    partitions = [partition_from_fields(parse_key_values(GPU_SITE_PARTITIONS[0]))]
    profile = profile_from_text("amd", draft_profile("amd", partitions, nodes).text, where="x")
    assert profile.node.accelerator == "amd" and profile.node.gpus == 8


@pytest.mark.slurm
def test_detect_on_the_local_slurm_gives_a_profile_that_plans(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    config = tmp_path / "config"
    environ = slurm_cluster.environ(XDG_CONFIG_HOME=str(config), HOME=os.environ["HOME"])
    target = config / "scaletrain" / "clusters" / "testsite.toml"
    result = scaletrain(
        "clusters", "detect", "--name", "testsite", "--output", str(target),
        cwd=tmp_path, environ=environ,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    text = target.read_text()
    assert "usable_cores = 4" in text and '[partitions."debug"]' in text
    assert "gpus = 4  # no GPUs: CPU processes" in text
    shown = scaletrain("clusters", "show", "testsite", cwd=tmp_path, environ=environ)
    assert shown.returncode == 0 and "debug" in shown.stdout
    (tmp_path / "train.py").touch()  # plan checks the script as submit does
    planned = scaletrain(
        "plan", "--cluster", "testsite", "--nodes", "2", "--gpus-per-node", "2",
        "--time", "0:10:00", "train.py", cwd=tmp_path, environ=environ,
    )  # fmt: skip
    assert planned.returncode == 0, planned.stderr
    assert "#SBATCH --nodes=2" in planned.stdout
    # A second detect does not overwrite the user's edited file by accident.
    again = scaletrain(
        "clusters", "detect", "--name", "testsite", "--output", str(target),
        cwd=tmp_path, environ=environ,
    )  # fmt: skip
    assert again.returncode == 2 and "exists already" in again.stderr
