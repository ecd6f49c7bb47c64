"""Properties of plans over many generated requests, partition by partition.

Requests are drawn inside a partition's limits (from its profile), so the planner must plan
every one of them: a refusal there is a failure. Requests that break exactly one limit must
be refused with the message that names that limit.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scaletrain.clusters.catalog import load_profile
from scaletrain.clusters.schema import ClusterProfile
from scaletrain.clusters.slurm_time import format_slurm_time
from scaletrain.core.errors import ScaletrainError
from scaletrain.launch.job_script import resource_options
from scaletrain.planning.modes import launch_modes
from scaletrain.planning.plan import Plan
from scaletrain.planning.planner import plan_job
from scaletrain.planning.request import Request

PROFILES = {name: load_profile(name, {}) for name in ("lumi", "puhti", "mahti", "local")}
PARTITIONS = [
    (cluster, name) for cluster, profile in PROFILES.items() for name in profile.partitions
]
# What one GPU-hour costs at the least, from each site's billing page (LUMI: half of one
# MI250X-hour per GCD; Puhti: 60 BU; Mahti: 100 BU) — a floor no estimate may go below.
GPU_HOUR_PRICE = {"lumi": 0.5, "puhti": 60.0, "mahti": 100.0}
# Jobs of more nodes than this plan the same way; fewer keep the examples varied.
MOST_NODES_DRAWN = 8
# A partition without a time limit is drawn up to 4 days.
LONGEST_DRAWN_S = 4 * 86400
# derandomize: the same examples every run, so a failure is never luck.
SETTINGS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)


@dataclass(frozen=True)
class Limits:
    """What a partition of a profile takes, read from the profile."""

    gpus_per_node: int
    nodes: int
    gpus: int | None
    seconds: int
    whole_nodes: bool


def limits(profile: ClusterProfile, partition: str) -> Limits:
    table = profile.partitions[partition]
    return Limits(
        gpus_per_node=profile.gpus_per_node_limit(partition),
        nodes=table.max_nodes or MOST_NODES_DRAWN,
        gpus=table.max_gpus,
        seconds=table.max_time_seconds or LONGEST_DRAWN_S,
        whole_nodes=table.whole_nodes,
    )


@st.composite
def fitting_requests(draw: st.DrawFn, cluster: str, partition: str) -> Request:
    """A request that partition `partition` of `cluster` takes, naming it."""
    profile = PROFILES[cluster]
    limit = limits(profile, partition)
    gpus_per_node = (
        profile.node.gpus if limit.whole_nodes else draw(st.integers(1, limit.gpus_per_node))
    )
    most_nodes = min(limit.nodes, MOST_NODES_DRAWN)
    if limit.gpus is not None:
        most_nodes = min(most_nodes, limit.gpus // gpus_per_node)
    nodes = draw(st.integers(1, most_nodes))
    fills_nodes = nodes == 1 or gpus_per_node == profile.node.gpus
    shape = (
        {"gpus": nodes * gpus_per_node}
        if fills_nodes and draw(st.booleans())
        else {"nodes": nodes, "gpus_per_node": gpus_per_node}
    )
    usable_memory = profile.node.usable_memory_gb
    accumulation = draw(st.sampled_from([1, 1, 2, 4]))
    return Request(
        cluster=cluster,
        script="train.py",
        time=format_slurm_time(draw(st.integers(60, limit.seconds))),
        partition=partition,
        mode=draw(st.sampled_from(sorted(launch_modes()))),
        cpus_per_gpu=draw(st.none() | st.integers(1, profile.node.usable_cores // gpus_per_node)),
        memory_gb_per_gpu=draw(
            st.none()
            if usable_memory is None or not profile.slurm.request_memory
            else st.none() | st.integers(1, usable_memory // gpus_per_node)
        ),
        accumulation_steps=accumulation,
        global_batch_size=draw(
            st.none() | st.integers(1, 64).map(lambda k: k * nodes * gpus_per_node * accumulation)
        ),
        **shape,
    )


def check_plan(request: Request, plan: Plan) -> None:
    """What every accepted plan must satisfy."""
    profile = PROFILES[request.cluster]
    node = profile.node
    asked = request.gpus or (request.nodes or 1) * (request.gpus_per_node or node.gpus)
    assert plan.nodes * plan.gpus_per_node == asked
    assert plan.cpus_per_task * plan.tasks_per_node <= node.usable_cores
    assert plan.cpus_per_task * plan.tasks_per_node == plan.cpus_per_gpu * plan.gpus_per_node
    assert plan.cpus_per_gpu == (request.cpus_per_gpu or profile.default_per_gpu.cores)
    if plan.memory_gb_per_node is not None:
        assert node.usable_memory_gb is not None
        assert plan.memory_gb_per_node <= node.usable_memory_gb
    limit = profile.partitions[plan.partition].max_time_seconds
    assert limit is None or plan.time_seconds <= limit
    if plan.billing is not None:
        floor = GPU_HOUR_PRICE[plan.cluster] * asked
        assert plan.billing.units_per_hour >= plan.billing.gpu_share_units_per_hour >= floor - 1e-9
        assert plan.billing.total_units == pytest.approx(
            plan.billing.units_per_hour * plan.time_seconds / 3600
        )
    if request.global_batch_size is not None:
        assert plan.per_gpu_batch_size is not None
        per_step = plan.per_gpu_batch_size * asked * request.accumulation_steps
        assert per_step == request.global_batch_size
    assert f"--nodes={plan.nodes}" in resource_options(plan)
    assert Plan.from_dict(plan.to_dict()) == plan


@pytest.mark.parametrize(("cluster", "partition"), PARTITIONS)
def test_every_request_within_a_partitions_limits_is_planned_there(
    cluster: str, partition: str
) -> None:
    @SETTINGS
    @given(fitting_requests(cluster, partition))
    def planned_as_asked(request: Request) -> None:
        plan = plan_job(request, PROFILES[cluster])  # a refusal fails the test
        assert (plan.partition, plan.partition_reason) == (partition, "as asked")
        check_plan(request, plan)

    planned_as_asked()


@pytest.mark.parametrize(
    ("cluster", "partition"),
    [(cluster, name) for cluster, name in PARTITIONS if PROFILES[cluster].partitions[name].auto],
)
def test_without_naming_it_a_fitting_partition_is_found(cluster: str, partition: str) -> None:
    """Partitions with auto = false (test partitions) are used only when named."""

    @SETTINGS
    @given(fitting_requests(cluster, partition))
    def planned_somewhere(request: Request) -> None:
        plan = plan_job(replace(request, partition=None), PROFILES[cluster])
        assert PROFILES[cluster].partitions[plan.partition].auto
        check_plan(request, plan)

    planned_somewhere()


LIMITS = ["gpus per node", "nodes", "time", "whole nodes", "cores", "memory", "batch"]


def has_limit(profile: ClusterProfile, partition: str, what: str) -> bool:
    """Whether the profile sets limit `what` for `partition` (the others apply everywhere)."""
    table = profile.partitions[partition]
    return {
        "nodes": table.max_nodes is not None,
        "time": table.max_time_seconds is not None,
        "whole nodes": table.whole_nodes,
        "memory": profile.slurm.request_memory and profile.node.usable_memory_gb is not None,
    }.get(what, True)


def broken(request: Request, profile: ClusterProfile, what: str) -> tuple[Request, str]:
    """`request` with limit `what` exceeded, and the words its refusal must contain."""
    assert request.partition is not None
    limit = limits(profile, request.partition)
    table = profile.partitions[request.partition]
    if request.gpus is None:
        nodes, per_node = request.nodes or 1, request.gpus_per_node or profile.node.gpus
    else:
        nodes = max(1, request.gpus // profile.node.gpus)
        per_node = min(request.gpus, profile.node.gpus)
    shape = {"gpus": None, "nodes": nodes, "gpus_per_node": per_node}
    if what == "gpus per node" and limit.gpus_per_node < profile.node.gpus:
        wrong = replace(request, **shape | {"nodes": 1, "gpus_per_node": limit.gpus_per_node + 1})
        return wrong, f"takes at most {limit.gpus_per_node} GPUs per node"
    if what == "gpus per node":
        wrong = replace(request, **shape | {"gpus_per_node": profile.node.gpus + 1})
        return wrong, f"{profile.name} nodes have {profile.node.gpus} GPUs"
    if what == "nodes":
        assert table.max_nodes is not None
        wrong = replace(request, **shape | {"nodes": table.max_nodes + 1})
        return wrong, f"takes at most {table.max_nodes} nodes"
    if what == "time":
        assert table.max_time_seconds is not None
        too_long = format_slurm_time(table.max_time_seconds + 60)
        return replace(request, time=too_long), "runs jobs for at most"
    if what == "whole nodes":
        wrong = replace(request, **shape | {"gpus_per_node": per_node - 1})
        return wrong, "allocates (and bills) whole nodes"
    if what == "cores":
        cores = profile.node.usable_cores // per_node + 1
        return replace(request, cpus_per_gpu=cores), f"{cores} cores per GPU × {per_node} GPUs"
    if what == "memory":
        assert profile.node.usable_memory_gb is not None
        memory = profile.node.usable_memory_gb // per_node + 1
        return replace(request, memory_gb_per_gpu=memory), f"{memory} GB per GPU × {per_node}"
    # One process without accumulation takes any batch: accumulate over 2 steps then.
    steps = request.accumulation_steps if per_node * nodes > 1 else 2
    batch = per_node * nodes * steps + 1
    wrong = replace(request, global_batch_size=batch, accumulation_steps=steps)
    return wrong, f"A global batch of {batch} cannot be split evenly over"


@pytest.mark.parametrize(
    ("cluster", "partition", "what"),
    [
        (cluster, partition, what)
        for cluster, partition in PARTITIONS
        for what in LIMITS
        if has_limit(PROFILES[cluster], partition, what)
    ],
)
def test_a_request_beyond_one_limit_is_refused_naming_that_limit(
    cluster: str, partition: str, what: str
) -> None:
    profile = PROFILES[cluster]

    @settings(SETTINGS, max_examples=20)
    @given(fitting_requests(cluster, partition))
    def refused_naming_it(request: Request) -> None:
        wrong, words = broken(request, profile, what)
        with pytest.raises(ScaletrainError) as caught:
            plan_job(wrong, profile)
        assert words in caught.value.problem, wrong
        assert caught.value.hint  # what to ask for instead

    refused_naming_it()
