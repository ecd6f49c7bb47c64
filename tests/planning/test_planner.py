"""Planner rules one by one: partition choice, shapes, fair share, limits, batch sizes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scaletrain.clusters.catalog import load_profile
from scaletrain.core.errors import ScaletrainError
from scaletrain.launch.job_script import resource_options
from scaletrain.planning.plan import Plan
from scaletrain.planning.planner import plan_job
from scaletrain.planning.request import Request
from scaletrain.planning.software import SoftwareChoice
from tests.clusters.site_files import MINIMAL, user_site


def plan(cluster: str = "lumi", **fields: Any) -> Plan:
    fields.setdefault("time", "2:00:00")
    return plan_job(
        Request(cluster=cluster, script="train.py", **fields), load_profile(cluster, {})
    )


def refusal(cluster: str = "lumi", **fields: Any) -> ScaletrainError:
    with pytest.raises(ScaletrainError) as caught:
        plan(cluster, **fields)
    return caught.value


def test_lumi_sixteen_gpus_take_two_whole_standard_g_nodes() -> None:
    decided = plan(gpus=16)
    assert (decided.partition, decided.nodes, decided.gpus_per_node) == ("standard-g", 2, 8)
    assert resource_options(decided) == (
        "--partition=standard-g", "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=56",
        "--gpus-per-node=8", "--mem=480G", "--time=2:00:00",
    )  # fmt: skip
    assert decided.environment == {
        "NCCL_SOCKET_IFNAME": "hsn0,hsn1,hsn2,hsn3",
        "FI_MR_CACHE_MONITOR": "userfaultfd",
        "SCALETRAIN_EXPECT_NET_PLUGIN": "1",
        "TORCH_HOME": "/scratch/$SLURM_JOB_ACCOUNT/$USER/torch-cache",
        "HF_HOME": "/scratch/$SLURM_JOB_ACCOUNT/$USER/hf-cache",
        "OMP_NUM_THREADS": "1",
    }
    assert decided.expand == ("TORCH_HOME", "HF_HOME")
    assert len(decided.cpu_masks) == 8
    assert decided.billing is not None
    assert (decided.billing.units_per_hour, decided.billing.total_units) == (8, 16)
    assert decided.warnings == ()


def test_nodes_and_gpus_per_node_give_the_same_plan_as_gpus() -> None:
    assert plan(nodes=2, gpus_per_node=8) == plan(gpus=16)


def test_one_node_goes_to_small_g_without_cpu_masks_when_partial() -> None:
    decided = plan(gpus=3, mode="srun")
    assert (decided.partition, decided.tasks_per_node, decided.cpus_per_task) == ("small-g", 3, 7)
    assert "--mem=180G" in resource_options(decided)
    assert decided.cpu_masks == ()  # a part of a node has no fixed cores


def test_mahti_partitions_and_no_mem() -> None:
    small = plan("mahti", gpus=2)
    assert small.partition == "gpusmall" and small.memory_gb_per_node is None
    assert not any(option.startswith("--mem") for option in resource_options(small))
    assert plan("mahti", gpus=4).partition == "gpumedium"
    error = refusal("mahti", gpus=3, partition="gpusmall")
    assert error.problem == (
        "3 GPUs on 1 node for 2:00:00 does not fit mahti gpusmall: "
        "gpusmall takes at most 2 GPUs per node."
    )
    assert error.hint == "ask for --partition gpumedium --gpus 4, or --gpus 2."


def test_more_gpus_per_node_than_a_node_has() -> None:
    error = refusal(nodes=1, gpus_per_node=9)
    assert error.problem == "lumi nodes have 8 GPUs; --gpus-per-node 9 cannot be placed."
    assert error.hint == "use at most 8 per node: --gpus 8 (1 node) or --gpus 16 (2 nodes)."


def test_gpus_that_do_not_fill_whole_nodes() -> None:
    error = refusal(gpus=12)
    assert error.problem == "12 GPUs do not fill whole nodes of 8 GPUs on lumi."
    assert error.hint.startswith("ask for --gpus 8 (1 node) or --gpus 16 (2 nodes)")


def test_uneven_split_when_asked_for_explicitly_is_a_warning() -> None:
    decided = plan(nodes=2, gpus_per_node=6)
    assert decided.partition == "small-g" and decided.world_size == 12
    assert decided.warnings[0].startswith("6 of 8 GPUs per node on 2 nodes")


def test_whole_node_partition_refuses_part_of_a_node() -> None:
    error = refusal(gpus=1, partition="standard-g")
    assert "standard-g allocates (and bills) whole nodes of 8 GPUs, not 1" in error.problem
    assert error.hint == "ask for --partition small-g, or --gpus 8."


def test_time_above_the_partition_limit() -> None:
    error = refusal(gpus=16, partition="standard-g", time="2-12:00:00")
    assert error.problem.endswith("standard-g runs jobs for at most 2 days.")
    assert error.hint == (
        "ask for --partition small-g, or --time 2-00:00:00 (resume from a checkpoint)."
    )
    # Chosen automatically, 2.5 days go to small-g (3 days), which also takes 2 nodes.
    assert plan(gpus=16, time="2-12:00:00").partition == "small-g"
    error = refusal(gpus=16, time="4-00:00:00")
    assert error.problem == (
        "No partition of lumi takes 16 GPUs on 2 nodes × 8 for 4-00:00:00: "
        "small-g runs jobs for at most 3 days; standard-g runs jobs for at most 2 days."
    )
    assert error.hint == "ask for --time 3-00:00:00 (resume from a checkpoint)."


def test_cores_above_the_fair_share_warn_with_the_extra_cost() -> None:
    decided = plan(gpus=2, cpus_per_gpu=14, time="10:00:00")
    # torchrun starts both processes in one task of 28 cores; each has 14 for its workers.
    assert decided.cpus_per_task == 28 and decided.environment["OMP_NUM_THREADS"] == "1"
    per_task = plan(gpus=2, cpus_per_gpu=14, time="10:00:00", mode="srun")
    assert per_task.cpus_per_task == 14 and per_task.environment["OMP_NUM_THREADS"] == "14"
    assert decided.billing is not None and decided.billing.units_per_hour == 2
    assert decided.warnings == (
        "14 cores per GPU (fair share 7) on lumi: it adds 1 GPU-hours per hour "
        "(10 for the whole run).",
    )


def test_cores_above_the_fair_share_where_they_are_not_billed() -> None:
    assert plan("mahti", gpus=2, cpus_per_gpu=40).warnings == (
        "40 cores per GPU (fair share 32) on mahti: other jobs cannot use what you hold beyond it.",
    )


def test_memory_above_the_fair_share_on_puhti_costs_per_gb() -> None:
    decided = plan("puhti", gpus=2, memory_gb_per_gpu=120)
    assert "--mem=240G" in resource_options(decided)
    # Puhti bills 0.1 per GB-hour: 2 × (120 - 93) GB above the fair share = 5.4 per hour.
    assert decided.warnings[0].startswith("120 GB per GPU (fair share 93 GB) on puhti: it adds 5.4")


def test_more_than_a_node_has_is_refused() -> None:
    error = refusal(gpus=8, cpus_per_gpu=8)
    assert (
        error.problem
        == "8 cores per GPU × 8 GPUs is more than the 56 cores a lumi node has for jobs."
    )
    assert error.hint == "ask for at most --cpus-per-gpu 7."
    too_much_memory = refusal(gpus=8, memory_gb_per_gpu=64)
    assert too_much_memory.problem == (
        "64 GB per GPU × 8 GPUs is more than the 480 GB a lumi node has for jobs."
    )
    assert too_much_memory.hint == "ask for at most --memory-per-gpu 60."


def test_memory_on_a_site_without_mem_is_reported_not_dropped_silently() -> None:
    decided = plan("mahti", gpus=2, memory_gb_per_gpu=100)
    assert "no --mem" in decided.warnings[0]


def test_global_batch_that_cannot_be_split() -> None:
    error = refusal(gpus=16, global_batch_size=100)
    assert (
        error.problem
        == "A global batch of 100 cannot be split evenly over 16 GPUs (6.25 samples each)."
    )
    assert error.hint == "use --global-batch-size 96 or 112, or a GPU count that divides 100."
    assert plan(gpus=16, global_batch_size=256, accumulation_steps=2).per_gpu_batch_size == 8
    assert refusal(gpus=16, global_batch_size=8).hint.startswith("use --global-batch-size 16,")
    with_accumulation = refusal(gpus=16, global_batch_size=100, accumulation_steps=2)
    assert with_accumulation.problem == (
        "A global batch of 100 cannot be split evenly over 16 GPUs × 2 accumulation steps "
        "(3.125 samples each)."
    )
    assert with_accumulation.hint == (
        "use --global-batch-size 96 or 128, or a GPU count that divides 50."
    )


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"gpus": 0}, "--gpus 0 is not a positive number."),
        ({"gpus": -2}, "--gpus -2 is not a positive number."),
        ({"nodes": 0, "gpus_per_node": 8}, "--nodes 0 is not a positive number."),
        ({"gpus": 8, "nodes": 1}, "Give either --gpus or --nodes/--gpus-per-node, not both."),
        ({}, "The request names no GPUs."),
        ({"gpus": 8, "time": "0"}, "The time limit '0' is zero."),
        ({"gpus": 8, "time": "soon"}, "'soon' is not a Slurm time limit."),
        ({"gpus": 8, "mode": "mpirun"}, "There is no launch mode called 'mpirun'."),
        ({"gpus": 8, "partition": "small"}, "lumi has no partition 'small'"),
    ],
)
def test_bad_values_are_refused_with_a_message(fields: dict[str, Any], message: str) -> None:
    assert refusal(**fields).problem.startswith(message)


def test_modes_decide_tasks_per_node() -> None:
    shapes = {
        mode: plan(gpus=16, mode=mode)
        for mode in ("torchrun", "accelerate", "srun", "deepspeed", "lightning")
    }
    assert {mode: (p.tasks_per_node, p.cpus_per_task) for mode, p in shapes.items()} == {
        "torchrun": (1, 56), "accelerate": (1, 56),
        "srun": (8, 7), "deepspeed": (8, 7), "lightning": (8, 7),
    }  # fmt: skip


def test_local_cluster_plans_cpu_processes_without_gpu_or_memory_options() -> None:
    decided = plan("local", nodes=2, gpus_per_node=2, mode="srun", account="ci")
    assert resource_options(decided) == (
        "--partition=debug", "--nodes=2", "--ntasks-per-node=2", "--cpus-per-task=1",
        "--time=2:00:00", "--account=ci",
    )  # fmt: skip
    assert decided.billing is None and decided.accelerator == "cpu"


def test_software_comes_from_the_request_or_the_profiles_default_stack() -> None:
    laif = plan(gpus=8).software
    assert (laif.stack, laif.container_command) == ("laif", "singularity run")
    assert laif.setup[-1] == "module load lumi-aif-singularity-bindings"
    assert plan(gpus=8, software=SoftwareChoice(stack="csc")).software.setup[-1] == (
        "module load pytorch"
    )
    own = SoftwareChoice(setup=("module load my-torch",), container_image="/scratch/t.sif")
    custom = plan(gpus=8, software=own).software
    assert custom.setup == ("module load my-torch",)
    assert (custom.container_command, custom.container_image) == (
        "singularity run",
        "/scratch/t.sif",
    )
    # --container on a module site picks the site's container stack.
    puhti = plan("puhti", gpus=4, software=SoftwareChoice(container_image="/p/t.sif")).software
    assert (puhti.stack, puhti.container_command, puhti.setup) == (
        "apptainer",
        "apptainer exec",
        (),
    )


def test_your_environment_goes_over_the_profiles() -> None:
    decided = plan(gpus=8, environment={"TORCH_HOME": "/flash/t", "X": "$Y"}, expand=("X",))
    assert decided.environment["TORCH_HOME"] == "/flash/t"
    assert decided.expand == ("HF_HOME", "X")  # yours is written as given, unless marked


def test_a_site_that_needs_exclusive_gets_it(tmp_path: Path) -> None:
    text = MINIMAL.replace('max_time = "2-00:00:00"', 'max_time = "2-00:00:00"\nexclusive = true')
    profile = load_profile("site", user_site(tmp_path, "site", text))
    decided = plan_job(Request(cluster="site", script="t.py", time="1:00:00", gpus=8), profile)
    assert resource_options(decided) == (
        "--partition=gpu", "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=64",
        "--gres=gpu:h100:4", "--mem=480G", "--time=1:00:00", "--exclusive",
    )  # fmt: skip


def test_an_unknown_partition_is_refused_with_the_nearest_name_or_the_automatic_choice() -> None:
    misspelt = refusal(gpus=8, partition="small")
    assert misspelt.problem == "lumi has no partition 'small'; it has small-g, standard-g, dev-g."
    assert misspelt.hint == "did you mean 'small-g'?"
    unrelated = refusal("mahti", gpus=4, partition="batch")
    assert unrelated.hint == "leave --partition out to choose one."


def test_gpus_per_node_alone_means_one_node() -> None:
    # Slurm's --nodes defaults to 1: --gpus-per-node 4 alone is 4 GPUs on one node.
    decided = plan("puhti", gpus_per_node=4)
    assert (decided.nodes, decided.gpus_per_node, decided.world_size) == (1, 4, 4)
    assert "--nodes=1" in resource_options(decided)


def test_a_job_beyond_a_partitions_gpu_and_node_limits_names_both() -> None:
    # Mahti's gpumedium takes up to 6 nodes, 24 GPUs (docs.csc.fi batch-job-partitions).
    error = refusal("mahti", gpus=28, partition="gpumedium")
    assert error.problem == (
        "28 GPUs on 7 nodes × 4 for 2:00:00 does not fit mahti gpumedium: "
        "gpumedium takes at most 24 GPUs per job; gpumedium takes at most 6 nodes."
    )
    assert error.hint.startswith("ask for --gpus 24")


def test_the_plan_keeps_what_was_asked_and_what_the_site_has() -> None:
    decided = plan(gpus=16, global_batch_size=256, accumulation_steps=2, mode="srun")
    # plan.toml and `scaletrain plan` show these; training reads the GPU's peak for its MFU.
    assert (decided.cluster, decided.accelerator, decided.mode) == ("lumi", "amd", "srun")
    assert (decided.global_batch_size, decided.accumulation_steps) == (256, 2)
    assert decided.per_gpu_batch_size == 8  # 256 / (16 GPUs × 2 steps)
    assert (decided.cpus_per_task, decided.cpus_per_gpu) == (7, 7)
    # One LUMI GCD: 64 GB of HBM2e, half an MI250X's 383 TFLOPS.
    assert (decided.gpu_memory_gb, decided.gpu_peak_tflops) == (64, 191.5)
    assert decided.partition_reason == "whole nodes on several nodes"
    assert plan(gpus=2).partition_reason == "the first partition that takes this request"
    assert plan(gpus=2, partition="small-g").partition_reason == "as asked"


def test_a_partition_without_a_billing_rule_has_no_cost_estimate(tmp_path: Path) -> None:
    text = MINIMAL.replace('billing = { rule = "sum", units_per_gpu_hour = 1 }\n', "")
    profile = load_profile("site", user_site(tmp_path, "site", text))
    decided = plan_job(Request(cluster="site", script="t.py", time="1:00:00", gpus=4), profile)
    assert decided.billing is None


def test_suggestions_keep_an_uneven_shape_on_a_partition_that_takes_it() -> None:
    # small-g shares nodes: 2 nodes × 6 GCDs fit there as asked (and are chosen there unasked).
    error = refusal(nodes=2, gpus_per_node=6, partition="standard-g")
    assert error.problem == (
        "12 GPUs on 2 nodes × 6 for 2:00:00 does not fit lumi standard-g: "
        "standard-g allocates (and bills) whole nodes of 8 GPUs, not 6."
    )
    assert error.hint == "ask for --partition small-g, or --gpus 16, or --gpus 8."


def test_suggestions_within_each_partitions_node_and_time_limits() -> None:
    # 5 nodes for 2.5 days: small-g takes 4 nodes for 3 days, standard-g 2 days.
    error = refusal(gpus=40, time="2-12:00:00")
    assert error.problem == (
        "No partition of lumi takes 40 GPUs on 5 nodes × 8 for 2-12:00:00: "
        "small-g takes at most 4 nodes; standard-g runs jobs for at most 2 days."
    )
    assert error.hint == (
        "ask for --time 2-00:00:00 (resume from a checkpoint), or --gpus 32, or --gpus 8."
    )


SITE_WITH_TEST_PARTITION = MINIMAL.replace(
    '[partitions.gpu]\nmax_time = "2-00:00:00"\n',
    '[partitions.test]\nmax_time = "15:00"\nauto = false\n'
    "[partitions.gpu]\nmax_nodes = 4\nmax_gpus = 8\n",
)


def test_suggestions_on_a_site_with_a_test_partition_and_no_time_limit(tmp_path: Path) -> None:
    profile = load_profile("site", user_site(tmp_path, "site", SITE_WITH_TEST_PARTITION))

    def refused(**fields: Any) -> ScaletrainError:
        with pytest.raises(ScaletrainError) as caught:
            plan_job(Request(cluster="site", script="t.py", time="2:00:00", **fields), profile)
        return caught.value

    # The test partition, listed first, is only for those who ask for it; gpu has no time limit.
    error = refused(gpus=16)
    assert error.problem == (
        "No partition of site takes 16 GPUs on 4 nodes × 4 for 2:00:00: "
        "gpu takes at most 8 GPUs per job."
    )
    assert error.hint == "ask for --gpus 8, or --gpus 4."
    # Two changes as near as each other: in the order of the options.
    assert refused(gpus=4, partition="test").hint == (
        "ask for --partition gpu, or --time 0:15:00 (resume from a checkpoint)."
    )


def test_a_partition_with_fewer_gpus_per_node_is_suggested_within_one_node(
    tmp_path: Path,
) -> None:
    text = MINIMAL.replace(
        '[partitions.gpu]\nmax_time = "2-00:00:00"\n',
        '[partitions.shared]\nmax_time = "2-00:00:00"\nmax_gpus_per_node = 2\nmax_nodes = 2\n'
        'billing = { rule = "sum", units_per_gpu_hour = 1 }\n'
        '[partitions.gpu]\nmax_time = "2-00:00:00"\nmax_nodes = 3\n',
    )
    profile = load_profile("site", user_site(tmp_path, "site", text))
    with pytest.raises(ScaletrainError) as caught:
        plan_job(Request(cluster="site", script="t.py", time="2:00:00", gpus=16), profile)
    assert caught.value.problem == (
        "No partition of site takes 16 GPUs on 4 nodes × 4 for 2:00:00: "
        "shared takes at most 2 GPUs per node; gpu takes at most 3 nodes."
    )
    # shared: 2 GPUs of one node; gpu: 3 whole nodes, or one node.
    assert caught.value.hint == "ask for --gpus 12, or --gpus 4, or --gpus 2."


def test_cpu_processes_ask_for_no_gpus_even_where_the_profile_names_the_option(
    tmp_path: Path,
) -> None:
    # A copy of a GPU site's profile set to accelerator = "cpu", e.g. to try jobs on CPUs.
    text = MINIMAL.replace('accelerator = "nvidia"', 'accelerator = "cpu"')
    profile = load_profile("site", user_site(tmp_path, "site", text))
    decided = plan_job(Request(cluster="site", script="t.py", time="1:00:00", gpus=4), profile)
    assert resource_options(decided) == (
        "--partition=gpu", "--nodes=1", "--ntasks-per-node=1", "--cpus-per-task=64",
        "--mem=480G", "--time=1:00:00",
    )  # fmt: skip


def test_a_variable_name_the_shell_cannot_export_is_refused() -> None:
    for name in ("1X", "MY-VAR", "A B", ""):
        error = refusal(gpus=8, environment={name: "1"})
        assert error.problem == f"{name!r} is not an environment variable name.", name
        assert error.hint == "write --env NAME=VALUE with a name of letters, digits and _."
    assert plan(gpus=8, environment={"_My_Var2": "1"}).environment["_My_Var2"] == "1"
