"""The rehearsal of a job (`scaletrain submit --rehearse`): the same request on the profile's
debug partition, as many nodes as it takes, for a short time.

It runs the same script, software and environment as the real job, so a wrong module, a
missing package, an error in the first steps or a broken save and resume shows within
minutes, while the real job keeps its place in the queue behind it. Only the shape and the
time change, and each change is said.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from scaletrain.clusters.schema import ClusterProfile
from scaletrain.clusters.slurm_time import format_slurm_time, parse_slurm_time
from scaletrain.core.errors import ScaletrainError
from scaletrain.planning.plan import Plan
from scaletrain.planning.request import Request

DEFAULT_REHEARSAL_S = 15 * 60
"""A rehearsal's time limit unless asked, or the partition's limit if that is shorter."""


@dataclass(frozen=True, slots=True)
class RehearsalRequest:
    request: Request
    """The real request on the rehearsal partition, in its shape and time."""
    notes: tuple[str, ...]
    """What differs from the real job and why (a smaller shape)."""


def rehearsal_request(
    request: Request, real: Plan, profile: ClusterProfile, *, time: str | None = None
) -> RehearsalRequest:
    """The request of the rehearsal of `real`: its partition, the real shape clipped to the
    partition's limits, and `time` (default: 15 minutes, or the partition's limit if shorter)."""
    name = profile.rehearsal_partition
    if name is None:
        raise ScaletrainError(
            f"{profile.name} names no partition for rehearsals.",
            "add `rehearsal = true` to its short debug partition in your profile "
            f'(`extends = "{profile.name}"`, docs/clusters-and-planning.md), or submit '
            "without --rehearse.",
        )
    partition = profile.partitions[name]
    gpus_per_node = min(real.gpus_per_node, profile.gpus_per_node_limit(name))
    if partition.max_gpus is not None:
        gpus_per_node = min(gpus_per_node, partition.max_gpus)
    nodes = min(real.nodes, partition.max_nodes or real.nodes)
    if partition.max_gpus is not None:
        nodes = min(nodes, partition.max_gpus // gpus_per_node)
    notes = []
    if (nodes, gpus_per_node) != (real.nodes, real.gpus_per_node):
        notes.append(
            f"scaled down from {real.nodes} node(s) × {real.gpus_per_node} to {nodes} × "
            f"{gpus_per_node}: {name} takes at most {_limits(profile, name)}"
        )
    limit = partition.max_time_seconds or DEFAULT_REHEARSAL_S
    seconds = parse_slurm_time(time) if time else min(DEFAULT_REHEARSAL_S, limit)
    if time and partition.max_time_seconds is not None and seconds > limit:
        raise ScaletrainError(
            f"--rehearsal-time {time} is longer than {name} allows ({format_slurm_time(limit)}).",
            f"give --rehearsal-time {format_slurm_time(limit)} or less, or leave it out.",
        )
    per_gpu = real.per_gpu_batch_size
    global_batch = (
        per_gpu * nodes * gpus_per_node * real.accumulation_steps if per_gpu is not None else None
    )
    if global_batch is not None and global_batch != real.global_batch_size:
        notes.append(
            f"global batch {global_batch} instead of {real.global_batch_size}: "
            f"{per_gpu} per GPU, as in the real job (your script's own arguments are unchanged)"
        )
    rehearsal = dataclasses.replace(
        request,
        partition=name,
        gpus=None,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        time=format_slurm_time(seconds),
        global_batch_size=global_batch,
    )
    return RehearsalRequest(rehearsal, tuple(notes))


def _limits(profile: ClusterProfile, name: str) -> str:
    """`2 nodes, 8 GPUs`: the limits of partition `name` on a job's shape."""
    partition = profile.partitions[name]
    limits = [
        f"{value} {what}"
        for value, what in (
            (partition.max_nodes, "node(s)"),
            (partition.max_gpus, "GPUs"),
            (partition.max_gpus_per_node, "GPUs per node"),
        )
        if value is not None
    ]
    return ", ".join(limits) or "fewer"
