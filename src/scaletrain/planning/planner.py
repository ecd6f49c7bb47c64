"""Request + cluster profile → Plan: shape, partition, cores and memory, options, cost."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from scaletrain.clusters.billing import Allocation, describe_rule
from scaletrain.clusters.schema import ClusterProfile
from scaletrain.clusters.slurm_time import minutes_seconds_warning, parse_slurm_time
from scaletrain.core.errors import ScaletrainError
from scaletrain.planning.memory import (
    BYTES_PER_PARAMETER,
    MemoryEstimate,
    ModelSize,
    estimate_memory,
    suggest_strategy,
)
from scaletrain.planning.modes import launch_mode
from scaletrain.planning.partitions import Shape, choose_partition, shape_for
from scaletrain.planning.plan import BillingEstimate, Plan
from scaletrain.planning.request import Request
from scaletrain.planning.script_launch import Decision, local_rank_option, visible_gpus
from scaletrain.planning.software import choose_software

_SECONDS_PER_HOUR = 3600
# How far the planner looks for a node count on which the model would fit with FSDP.
_MAX_NODES_TRIED = 1024
# So many GPUs that every sharded state is nothing per GPU.
_UNBOUNDED_GPUS = 10**12


@dataclass(frozen=True, slots=True)
class _PerGpu:
    cores: int
    memory_gb: int | None


def plan_job(request: Request, profile: ClusterProfile) -> Plan:
    """Decide everything a job script needs, or fail saying what to ask for instead."""
    mode = launch_mode(request.mode)
    facts = request.script_facts
    request.extras.check_for(mode, estimating_memory=request.model is not None)
    software = choose_software(request.software, profile)
    time_seconds = parse_slurm_time(request.time)
    shape = shape_for(request, profile)
    partition, partition_reason = choose_partition(profile, shape, time_seconds, request.partition)
    warnings = [warning for warning in [minutes_seconds_warning(request.time)] if warning]
    if shape.nodes > 1 and shape.gpus_per_node < profile.node.gpus:
        warnings.append(
            f"{shape.gpus_per_node} of {profile.node.gpus} GPUs per node on {shape.nodes} nodes: "
            "traffic between nodes is slower than inside one; full nodes train faster."
        )
    per_gpu = _per_gpu(request, profile, shape, warnings)
    tasks_per_node = mode.tasks_for(shape.gpus_per_node)
    allocation = _allocation(profile, shape, per_gpu)
    billing = _estimate(profile, partition, allocation, time_seconds)
    warnings.extend(_above_fair_share(profile, partition, shape, per_gpu, billing))
    whole_nodes = (
        profile.partitions[partition].whole_nodes or profile.partitions[partition].exclusive
    )
    full_node = shape.gpus_per_node == profile.node.gpus
    # Masks name fixed cores: only a node held alone is sure to give them (LUMI: masks work
    # with --exclusive only). A full node on a shared partition costs the same held alone.
    masks = profile.node.cpu_masks if full_node else ()
    environment = {
        **profile.exported,
        "OMP_NUM_THREADS": str(per_gpu.cores if mode.tasks_per_node == "per-gpu" else 1),
        **request.environment,
    }
    expand = tuple(name for name in profile.expanded if name not in request.environment) + tuple(
        name for name in request.expand if name in request.environment
    )
    decided = Plan(
        cluster=profile.name,
        accelerator=profile.node.accelerator,
        partition=partition,
        partition_reason=partition_reason,
        launch_mode=mode,
        nodes=shape.nodes,
        gpus_per_node=shape.gpus_per_node,
        tasks_per_node=tasks_per_node,
        cpus_per_task=allocation.cores_per_node // tasks_per_node,
        cpus_per_gpu=per_gpu.cores,
        memory_gb_per_node=allocation.memory_gb_per_node,
        time_seconds=time_seconds,
        exclusive=profile.partitions[partition].exclusive or bool(masks and not whole_nodes),
        gpu_request=profile.slurm.gpu_request,
        environment=environment,
        expand=expand,
        cpu_masks=masks,
        software=software,
        extras=request.extras,
        script=request.script,
        script_args=request.script_args,
        own_gpu_per_task=bool(visible_gpus(mode, facts, request.visible_gpus).value),
        local_rank_option=_option(local_rank_option(mode, facts, request.local_rank_argument)),
        account=request.account,
        job_name=request.job_name,
        global_batch_size=request.global_batch_size,
        accumulation_steps=request.accumulation_steps,
        per_gpu_batch_size=_per_gpu_batch_size(request, shape.gpus),
        billing=billing,
        gpu_memory_gb=profile.node.gpu_memory_gb,
        gpu_peak_tflops=profile.node.peak_tflops,
    )
    memory = _model_memory(request, profile, decided, warnings)
    return dataclasses.replace(decided, **memory, warnings=tuple(warnings))


def _option(decision: Decision) -> str | None:
    return decision.value if isinstance(decision.value, str) else None


def _model_memory(
    request: Request, profile: ClusterProfile, decided: Plan, warnings: list[str]
) -> dict[str, Any]:
    """The memory estimate of every strategy and the one to use, for the requested model."""
    size = request.model
    if size is None:
        return {}
    gpu_memory = profile.node.gpu_memory_gb
    if gpu_memory is None:
        warnings.append(
            f"{profile.name} does not say how much memory its GPUs have (node.gpu_memory_gb): "
            "no estimate of whether the model fits."
        )
        return {"model_parameters": size.parameters}
    if decided.per_gpu_batch_size is not None:
        size = dataclasses.replace(size, micro_batch=decided.per_gpu_batch_size)
    gpus = {"world_size": decided.world_size, "gpus_per_node": decided.gpus_per_node}
    estimates = [
        estimate_memory(size, strategy, gpu_memory_gb=gpu_memory, **gpus)
        for strategy in BYTES_PER_PARAMETER
    ]
    suggested = suggest_strategy(estimates, nodes=decided.nodes)
    if suggested is None:
        warnings.append(_does_not_fit(size, decided, gpu_memory))
    return {
        "model_parameters": size.parameters,
        "memory_estimates": tuple(estimates),
        "suggested_strategy": suggested,
    }


def _does_not_fit(size: ModelSize, decided: Plan, gpu_memory: float) -> str:
    """What to change when even FSDP does not fit: more GPUs, recomputation, smaller batches."""

    def fsdp_on(gpus: int) -> MemoryEstimate:
        return estimate_memory(
            size, "fsdp", world_size=gpus, gpus_per_node=decided.gpus_per_node,
            gpu_memory_gb=gpu_memory,
        )  # fmt: skip

    # What stays on every GPU however many share the states: activations and the two blocks
    # gathered at a time. When that alone is too much, more GPUs cannot help (nor are tried).
    unshardable = fsdp_on(_UNBOUNDED_GPUS)
    fixes, why = [], ""
    if unshardable.fits:
        node_counts = range(decided.nodes + 1, _MAX_NODES_TRIED + 1)
        gpu_counts = (nodes * decided.gpus_per_node for nodes in node_counts)
        needed = next((gpus for gpus in gpu_counts if fsdp_on(gpus).fits), None)
        fixes.append(f"--gpus {needed}" if needed else "more GPUs")
    else:
        why = f" ({unshardable.total_gb:.1f} GB per GPU stay whatever the number of GPUs)"
    if not size.activation_checkpointing and size.layers:
        fixes.append("--activation-checkpointing")
    if size.micro_batch > 1:
        fixes.append("a smaller micro-batch")
    if not fixes:
        fixes.append("a shorter sequence or a narrower model")
    return (
        f"A model of {size.parameters:,} parameters does not fit on {decided.world_size} "
        f"GPUs of {gpu_memory:g} GB even with FSDP{why}; try {', or '.join(fixes)}."
    )


def _per_gpu(
    request: Request, profile: ClusterProfile, shape: Shape, warnings: list[str]
) -> _PerGpu:
    """Cores and memory per GPU: asked for, or the profile's default; never beyond a node."""
    node = profile.node
    cores = request.cpus_per_gpu or profile.default_per_gpu.cores
    if cores * shape.gpus_per_node > node.usable_cores:
        raise ScaletrainError(
            f"{cores} cores per GPU × {shape.gpus_per_node} GPUs is more than the "
            f"{node.usable_cores} cores a {profile.name} node has for jobs.",
            f"ask for at most --cpus-per-gpu {node.usable_cores // shape.gpus_per_node}.",
        )
    if not profile.slurm.request_memory:
        if request.memory_gb_per_gpu is not None:
            warnings.append(
                f"{profile.name} assigns memory with the GPUs (no --mem); "
                f"--memory-per-gpu {request.memory_gb_per_gpu} was not used."
            )
        return _PerGpu(cores, None)
    memory = request.memory_gb_per_gpu or profile.default_per_gpu.memory_gb
    usable = node.usable_memory_gb
    if memory is not None and usable is not None and memory * shape.gpus_per_node > usable:
        raise ScaletrainError(
            f"{memory} GB per GPU × {shape.gpus_per_node} GPUs is more than the {usable} GB "
            f"a {profile.name} node has for jobs.",
            f"ask for at most --memory-per-gpu {usable // shape.gpus_per_node}.",
        )
    return _PerGpu(cores, memory)


def _allocation(profile: ClusterProfile, shape: Shape, per_gpu: _PerGpu) -> Allocation:
    memory = None if per_gpu.memory_gb is None else per_gpu.memory_gb * shape.gpus_per_node
    return Allocation(
        nodes=shape.nodes,
        gpus_per_node=shape.gpus_per_node,
        cores_per_node=per_gpu.cores * shape.gpus_per_node,
        memory_gb_per_node=memory,
        node_gpus=profile.node.gpus,
    )


def _estimate(
    profile: ClusterProfile, partition: str, allocation: Allocation, time_seconds: int
) -> BillingEstimate | None:
    rule = profile.partitions[partition].billing
    if rule is None or profile.billing is None:
        return None
    per_hour = rule.units_per_hour(allocation)
    hours = time_seconds / _SECONDS_PER_HOUR
    return BillingEstimate(
        unit=profile.billing.unit,
        rule=f"{partition}: {describe_rule(rule, profile.billing.unit)}",
        arithmetic=rule.arithmetic(allocation),
        units_per_hour=per_hour,
        gpu_share_units_per_hour=rule.gpu_share_per_hour(allocation),
        hours=hours,
        total_units=per_hour * hours,
    )


def _above_fair_share(
    profile: ClusterProfile,
    partition: str,
    shape: Shape,
    per_gpu: _PerGpu,
    billing: BillingEstimate | None,
) -> list[str]:
    """Warnings for cores or memory above the fair share, with what they add to the bill."""
    fair_memory = profile.fair_share_memory_gb
    above = []
    if per_gpu.cores > profile.fair_share_cores:
        above.append(f"{per_gpu.cores} cores per GPU (fair share {profile.fair_share_cores})")
    if (
        per_gpu.memory_gb is not None
        and fair_memory is not None
        and per_gpu.memory_gb > fair_memory
    ):
        above.append(f"{per_gpu.memory_gb} GB per GPU (fair share {fair_memory} GB)")
    if not above:
        return []
    fair = _PerGpu(
        min(per_gpu.cores, profile.fair_share_cores),
        None if per_gpu.memory_gb is None else min(per_gpu.memory_gb, fair_memory or 0),
    )
    rule = profile.partitions[partition].billing
    extra = 0.0
    if billing is not None and rule is not None:
        extra = billing.units_per_hour - rule.units_per_hour(_allocation(profile, shape, fair))
    cost = (
        f"it adds {extra:g} {billing.unit} per hour ({extra * billing.hours:g} for the whole run)"
        if billing is not None and extra > 0
        else "other jobs cannot use what you hold beyond it"
    )
    return [f"{' and '.join(above)} on {profile.name}: {cost}."]


def _per_gpu_batch_size(request: Request, gpus: int) -> int | None:
    """Samples per GPU per micro-step; the global batch must split evenly."""
    batch = request.global_batch_size
    if batch is None:
        return None
    step = gpus * request.accumulation_steps
    if batch % step == 0:
        return batch // step
    lower, upper = batch // step * step, (batch // step + 1) * step
    sizes = " or ".join(str(size) for size in (lower, upper) if size > 0)
    accumulation = request.accumulation_steps
    over = f"{gpus} GPUs" + (f" × {accumulation} accumulation steps" if accumulation > 1 else "")
    raise ScaletrainError(
        f"A global batch of {batch} cannot be split evenly over {over} "
        f"({batch / step:g} samples each).",
        f"use --global-batch-size {sizes}, or a GPU count that divides {batch // accumulation}.",
    )
