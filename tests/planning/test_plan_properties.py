"""Properties of every plan the planner accepts, over many generated requests."""

from __future__ import annotations

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from scaletrain.clusters.catalog import load_profile
from scaletrain.clusters.slurm_time import format_slurm_time
from scaletrain.core.errors import ScaletrainError
from scaletrain.launch.job_script import resource_options
from scaletrain.planning.modes import launch_modes
from scaletrain.planning.plan import Plan
from scaletrain.planning.planner import plan_job
from scaletrain.planning.request import Request

PROFILES = {name: load_profile(name, {}) for name in ("lumi", "puhti", "mahti", "local")}
# What one GPU-hour costs at the least, from each site's billing page (LUMI: half of one
# MI250X-hour per GCD; Puhti: 60 BU; Mahti: 100 BU) — a floor no estimate may go below.
GPU_HOUR_PRICE = {"lumi": 0.5, "puhti": 60.0, "mahti": 100.0}


@st.composite
def requests(draw: st.DrawFn) -> Request:
    cluster = draw(st.sampled_from(sorted(PROFILES)))
    profile = PROFILES[cluster]
    shape = draw(
        st.one_of(
            st.fixed_dictionaries(
                {
                    "gpus": st.integers(1, profile.node.gpus)
                    | st.integers(1, 8).map(lambda nodes: nodes * profile.node.gpus)
                    | st.integers(1, 8 * profile.node.gpus)
                }
            ),
            st.fixed_dictionaries(
                {
                    "nodes": st.integers(1, 8),
                    "gpus_per_node": st.integers(1, profile.node.gpus),
                }
            ),
        )
    )
    return Request(
        cluster=cluster,
        script="train.py",
        time=format_slurm_time(draw(st.integers(60, 36 * 3600) | st.integers(60, 4 * 86400))),
        partition=draw(st.sampled_from([None, None, None, *profile.partitions])),
        mode=draw(st.sampled_from(sorted(launch_modes()))),
        # Mostly the defaults; sometimes up to twice the fair share (more is refused).
        cpus_per_gpu=draw(st.none() | st.integers(1, 2 * profile.fair_share_cores)),
        memory_gb_per_gpu=draw(st.none() | st.integers(1, 2 * (profile.fair_share_memory_gb or 8))),
        global_batch_size=draw(st.sampled_from([None, None, 256, 1024, 100])),
        **shape,
    )


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests())
def test_every_accepted_plan_fits_the_nodes_and_bills_at_least_the_gpus(request: Request) -> None:
    profile = PROFILES[request.cluster]
    try:
        plan = plan_job(request, profile)
    except ScaletrainError as refusal:
        event("refused")
        assert refusal.problem and refusal.hint  # every refusal says what to do instead
        return
    event(f"planned on {plan.partition}")
    node = profile.node
    asked = request.gpus or (request.nodes or 1) * (request.gpus_per_node or node.gpus)
    assert plan.nodes * plan.gpus_per_node == asked
    assert plan.cpus_per_task * plan.tasks_per_node <= node.usable_cores
    assert plan.cpus_per_task * plan.tasks_per_node == plan.cpus_per_gpu * plan.gpus_per_node
    if plan.memory_gb_per_node is not None:
        assert node.usable_memory_gb is not None
        assert plan.memory_gb_per_node <= node.usable_memory_gb
    limit = profile.partitions[plan.partition].max_time_seconds
    assert limit is None or plan.time_seconds <= limit
    if plan.billing is not None:
        floor = GPU_HOUR_PRICE[plan.cluster] * asked
        assert plan.billing.units_per_hour >= plan.billing.gpu_share_units_per_hour >= floor - 1e-9
    if plan.per_gpu_batch_size is not None:
        assert plan.per_gpu_batch_size * asked == request.global_batch_size
    assert f"--nodes={plan.nodes}" in resource_options(plan)
    assert Plan.from_dict(plan.to_dict()) == plan
