"""Billing rules give the sites' own worked examples."""

from __future__ import annotations

from scaletrain.clusters.billing import Allocation
from scaletrain.clusters.catalog import load_profile


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
