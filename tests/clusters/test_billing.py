"""Billing rules give the sites' own worked examples."""

from __future__ import annotations

from typing import Any

import pytest

from scaletrain.clusters.billing import Allocation
from scaletrain.clusters.catalog import load_profile
from scaletrain.planning.planner import plan_job
from scaletrain.planning.request import Request


def lumi_rule(partition: str):  # type: ignore[no-untyped-def]
    rule = load_profile("lumi", {}).partitions[partition].billing
    assert rule is not None
    return rule


def allocation(
    nodes: int, gpus: int, cores: int, memory: int | None, node_gpus: int = 8
) -> Allocation:
    return Allocation(
        nodes=nodes, gpus_per_node=gpus, cores_per_node=cores, memory_gb_per_node=memory,
        node_gpus=node_gpus,
    )  # fmt: skip


def test_lumi_small_g_examples_from_the_billing_page() -> None:
    # docs.lumi-supercomputer.eu billing: "a job allocating 2 GCDs and running for 24 hours"
    # consumes 24 GPU-hours; "1 GCD for 24 hours but 128 GB of memory": 24 GPU-hours.
    rule = lumi_rule("small-g")
    assert rule.units_per_hour(allocation(1, 2, 14, 120)) * 24 == 24
    assert rule.units_per_hour(allocation(1, 1, 7, 128)) * 24 == 24
    # 001: "ask for only 1 GPU but half of the cores ... billed for half a GPU node, so 2 per hour"
    assert rule.units_per_hour(allocation(1, 1, 32, 60)) == 2
    assert rule.gpu_share_per_hour(allocation(1, 1, 32, 60)) == 0.5


def test_lumi_standard_g_bills_whole_nodes() -> None:
    # "If you allocate 4 nodes in the standard-g partition ... for 24 hours: 4 * 4 * 24 = 384"
    assert lumi_rule("standard-g").units_per_hour(allocation(4, 8, 56, 480)) * 24 == 384


def test_csc_rules() -> None:
    puhti = load_profile("puhti", {}).partitions["gpu"].billing
    mahti = load_profile("mahti", {}).partitions["gpumedium"].billing
    assert puhti is not None and mahti is not None
    # Puhti: 60 per GPU + 1 per core + 0.1 per GB, per hour: 2 GPUs, 20 cores, 160 GB.
    assert puhti.units_per_hour(allocation(1, 2, 20, 160, node_gpus=4)) == 120 + 20 + 16
    # Mahti: "100 GPU BU per hour, or in total 400 GPU BU per hour for a full GPU node".
    assert mahti.units_per_hour(allocation(1, 4, 128, None, node_gpus=4)) == 400


# Plans whose cores, memory, GPUs and nodes are not whole slices, so that every rounding the
# sites' rules contain is exercised. Each expected figure is worked out by hand from the rule
# in the site's documentation (quoted in the profiles), never taken from the code:
# - LUMI small-g (docs.lumi-supercomputer.eu, "GPU billing"): GPU-hours per hour =
#   0.5 × max(GCDs, ⌈cores / 8⌉, ⌈memory / 64 GB⌉): a started slice is a whole slice.
# - LUMI standard-g: 4 GPU-hours per node-hour, whole nodes, whatever the job uses.
# - Puhti (docs.csc.fi, billing): 60 BU per GPU-hour + 1 per core-hour + 0.1 per GiB-hour,
#   each counted exactly (no slices, nothing rounded).
# - Mahti: 100 BU per A100-hour; cores and memory are not billed.
ROUNDING_EXAMPLES = [
    # (cluster, request, expected per hour, hours, hand arithmetic)
    ("lumi", {"gpus": 1, "cpus_per_gpu": 20}, 1.5, 10, "⌈20/8⌉ = 3 slices > 1 GCD"),
    ("lumi", {"gpus": 1, "cpus_per_gpu": 9}, 1.0, 10, "⌈9/8⌉ = 2 slices: 1 core over is a slice"),
    ("lumi", {"gpus": 1, "memory_gb_per_gpu": 100}, 1.0, 10, "⌈100/64⌉ = 2 slices"),
    ("lumi", {"gpus": 1, "memory_gb_per_gpu": 65}, 1.0, 1, "⌈65/64⌉ = 2: 1 GB over is a slice"),
    ("lumi", {"gpus": 3, "cpus_per_gpu": 9}, 2.0, 1, "⌈27/8⌉ = 4 slices > 3 GCDs"),
    ("lumi", {"gpus": 5}, 2.5, 1, "5 GCDs > ⌈35/8⌉ = 5, ⌈300/64⌉ = 5"),
    ("lumi", {"gpus": 7, "memory_gb_per_gpu": 68}, 4.0, 1, "⌈476/64⌉ = 8 slices > 7 GCDs"),
    (
        "lumi",
        {"nodes": 2, "gpus_per_node": 3, "cpus_per_gpu": 11},
        4.5,
        2,
        "2 nodes × 3 GCDs × 11 cores = 66 cores, ⌈66/8⌉ = 9 slices > 6 GCDs",
    ),
    ("lumi", {"gpus": 24}, 12.0, 3, "standard-g: 3 whole nodes × 4"),
    (
        "lumi",
        {"nodes": 3, "gpus_per_node": 8, "cpus_per_gpu": 5, "partition": "standard-g"},
        12.0,
        1,
        "standard-g bills 3 whole nodes × 4 even for 5 of 7 cores per GCD",
    ),
    (
        "puhti",
        {"gpus": 3, "cpus_per_gpu": 7, "memory_gb_per_gpu": 37},
        212.1,
        1.5,
        "3 × 60 + 21 cores × 1 + 111 GiB × 0.1",
    ),
    (
        "puhti",
        {"nodes": 2, "gpus_per_node": 3, "cpus_per_gpu": 7, "memory_gb_per_gpu": 37},
        424.2,
        1,
        "2 nodes × (3 × 60 + 21 + 11.1)",
    ),
    ("puhti", {"gpus": 1, "cpus_per_gpu": 1, "memory_gb_per_gpu": 1}, 61.1, 1, "60 + 1 + 0.1"),
    ("mahti", {"gpus": 1, "cpus_per_gpu": 3}, 100.0, 0.75, "1 A100; cores not billed"),
    ("mahti", {"gpus": 12}, 1200.0, 2, "gpumedium: 3 nodes × 4 A100 × 100"),
]


@pytest.mark.parametrize(
    ("cluster", "request_fields", "per_hour", "hours", "arithmetic"),
    ROUNDING_EXAMPLES,
    # ASCII ids: tools that pass test ids on a command line (mutmut) cannot match ⌈ or ×.
    ids=[f"{example[0]}-{number}" for number, example in enumerate(ROUNDING_EXAMPLES)],
)
def test_partial_slices_are_billed_as_the_site_rounds_them(
    cluster: str, request_fields: dict[str, Any], per_hour: float, hours: float, arithmetic: str
) -> None:
    seconds = round(hours * 3600)
    time = f"{seconds // 3600}:{seconds % 3600 // 60:02d}:00"
    plan = plan_job(
        Request(cluster=cluster, script="train.py", time=time, **request_fields),
        load_profile(cluster, {}),
    )
    assert plan.billing is not None
    assert plan.billing.units_per_hour == pytest.approx(per_hour), arithmetic
    assert plan.billing.total_units == pytest.approx(per_hour * hours), arithmetic


def test_the_issue_example_one_gcd_with_twenty_cores_for_ten_hours() -> None:
    # 1 GCD + 20 cores on small-g for 10 h: ⌈20/8⌉ = 3 slices × 0.5 × 10 h = 15 GPU-hours,
    # of which the GCD's fair share (7 cores: 1 slice) is 5: the warning prices the other 10.
    plan = plan_job(
        Request(cluster="lumi", script="train.py", time="10:00:00", gpus=1, cpus_per_gpu=20),
        load_profile("lumi", {}),
    )
    assert plan.billing is not None and plan.billing.total_units == 15
    assert plan.billing.arithmetic == "max(1 GPUs, ⌈20 cores/8⌉, ⌈60 GB/64 GB⌉) = 3 × 0.5"
    assert plan.warnings == (
        "20 cores per GPU (fair share 7) on lumi: it adds 1 GPU-hours per hour "
        "(10 for the whole run).",
    )


def test_memory_above_the_fair_share_is_priced_by_the_started_slice() -> None:
    # 100 GB with 1 GCD: ⌈100/64⌉ = 2 slices = 1 GPU-hour per hour, twice the 0.5 of the
    # fair share (60 GB: 1 slice); the warning must say what the extra slice costs.
    plan = plan_job(
        Request(cluster="lumi", script="train.py", time="4:00:00", gpus=1, memory_gb_per_gpu=100),
        load_profile("lumi", {}),
    )
    assert plan.billing is not None and plan.billing.total_units == 4
    assert plan.warnings == (
        "100 GB per GPU (fair share 60 GB) on lumi: it adds 0.5 GPU-hours per hour "
        "(2 for the whole run).",
    )


@pytest.mark.parametrize(
    ("cores", "memory", "slices"),
    [(8, 64, 1), (9, 64, 2), (8, 65, 2), (16, 128, 2), (17, 1, 3), (1, 129, 3), (23, 191, 3)],
)
def test_largest_share_counts_every_started_slice(cores: int, memory: int, slices: int) -> None:
    # One GCD holding `cores` and `memory`: billed max(1, ⌈cores/8⌉, ⌈memory/64⌉) × 0.5.
    rule = lumi_rule("small-g")
    assert rule.units_per_hour(allocation(1, 1, cores, memory)) == slices * 0.5
    assert rule.gpu_share_per_hour(allocation(1, 1, cores, memory)) == 0.5


def test_what_the_gpus_alone_cost_under_each_rule() -> None:
    # The GPU share is the bill of the GPUs alone; more on the bill means cores or memory
    # beyond the fair share, or a whole node held for fewer GPUs.
    assert lumi_rule("small-g").gpu_share_per_hour(allocation(1, 3, 40, 300)) == 1.5  # 3 × 0.5
    # standard-g: 4 per node-hour for 8 GCDs, so 3 GCDs' share is 3/8 of 4.
    assert lumi_rule("standard-g").gpu_share_per_hour(allocation(1, 3, 21, 180)) == 1.5
    assert lumi_rule("standard-g").units_per_hour(allocation(1, 3, 21, 180)) == 4
    puhti = load_profile("puhti", {}).partitions["gpu"].billing
    assert puhti is not None
    assert puhti.gpu_share_per_hour(allocation(2, 3, 21, 111, node_gpus=4)) == 360  # 6 × 60


def test_the_arithmetic_shown_is_the_sites_sum() -> None:
    puhti = load_profile("puhti", {}).partitions["gpu"].billing
    mahti = load_profile("mahti", {}).partitions["gpusmall"].billing
    assert puhti is not None and mahti is not None
    assert (
        puhti.arithmetic(allocation(2, 3, 7, 37, node_gpus=4))
        == "6 GPUs × 60 + 14 cores × 1 + 74 GB × 0.1"
    )
    # Mahti bills GPUs only; a site that bills memory names no memory when none is asked.
    assert mahti.arithmetic(allocation(1, 2, 64, None, node_gpus=4)) == "2 GPUs × 100"
    assert puhti.arithmetic(allocation(1, 1, 10, None, node_gpus=4)) == "1 GPUs × 60 + 10 cores × 1"
