"""Nodes × GPUs per node, and the partition that takes them — or what to ask for instead."""

from __future__ import annotations

import difflib
import math
from dataclasses import dataclass

from scaletrain.clusters.schema import ClusterProfile
from scaletrain.clusters.slurm_time import describe_duration, format_slurm_time
from scaletrain.core.errors import ScaletrainError
from scaletrain.planning.request import Request

# Alternatives offered in one hint: enough to choose from, few enough to read.
_MAX_SUGGESTIONS = 3


@dataclass(frozen=True, slots=True)
class Shape:
    nodes: int
    gpus_per_node: int

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def __str__(self) -> str:
        if self.nodes == 1:
            return f"{self.gpus} GPU{'s' if self.gpus > 1 else ''} on 1 node"
        return f"{self.gpus} GPUs on {self.nodes} nodes × {self.gpus_per_node}"


def shape_for(request: Request, profile: ClusterProfile) -> Shape:
    """Nodes × GPUs per node: `--gpus N` fills whole nodes, `--nodes/--gpus-per-node` as given."""
    node_gpus = profile.node.gpus
    if request.gpus is not None:
        if request.gpus <= node_gpus:
            return Shape(1, request.gpus)
        if request.gpus % node_gpus == 0:
            return Shape(request.gpus // node_gpus, node_gpus)
        raise ScaletrainError(
            f"{request.gpus} GPUs do not fill whole nodes of {node_gpus} GPUs on {profile.name}.",
            f"ask for {_whole_node_counts(request.gpus, node_gpus)}; to split GPUs unevenly on "
            "purpose, give --nodes N --gpus-per-node G.",
        )
    shape = Shape(request.nodes or 1, request.gpus_per_node or node_gpus)
    if shape.gpus_per_node > node_gpus:
        raise ScaletrainError(
            f"{profile.name} nodes have {node_gpus} GPUs; --gpus-per-node {shape.gpus_per_node} "
            "cannot be placed.",
            f"use at most {node_gpus} per node: {_whole_node_counts(shape.gpus, node_gpus)}.",
        )
    return shape


def misfits(profile: ClusterProfile, name: str, shape: Shape, time_seconds: int) -> list[str]:
    """Why `shape` for `time_seconds` does not fit partition `name` (empty: it fits)."""
    partition = profile.partitions[name]
    reasons = []
    per_node_limit = profile.gpus_per_node_limit(name)
    if shape.gpus_per_node > per_node_limit:
        reasons.append(f"{name} takes at most {per_node_limit} GPUs per node")
    elif partition.max_gpus is not None and shape.gpus > partition.max_gpus:
        reasons.append(f"{name} takes at most {partition.max_gpus} GPUs per job")
    if partition.max_nodes is not None and shape.nodes > partition.max_nodes:
        reasons.append(f"{name} takes at most {partition.max_nodes} nodes")
    if partition.whole_nodes and shape.gpus_per_node != profile.node.gpus:
        reasons.append(
            f"{name} allocates (and bills) whole nodes of {profile.node.gpus} GPUs, "
            f"not {shape.gpus_per_node}"
        )
    limit = partition.max_time_seconds
    if limit is not None and time_seconds > limit:
        reasons.append(f"{name} runs jobs for at most {describe_duration(limit)}")
    return reasons


def choose_partition(
    profile: ClusterProfile, shape: Shape, time_seconds: int, requested: str | None
) -> tuple[str, str]:
    """The partition and why: the one asked for if it fits, else the first that fits,
    preferring whole-node partitions for jobs on several nodes (where sites want them)."""
    if requested is not None:
        if requested not in profile.partitions:
            close = difflib.get_close_matches(requested, profile.partitions, n=1)
            raise ScaletrainError(
                f"{profile.name} has no partition {requested!r}; "
                f"it has {', '.join(profile.partitions)}.",
                f"did you mean {close[0]!r}?" if close else "leave --partition out to choose one.",
            )
        reasons = misfits(profile, requested, shape, time_seconds)
        if reasons:
            raise ScaletrainError(
                f"{shape} for {format_slurm_time(time_seconds)} does not fit {profile.name} "
                f"{requested}: {'; '.join(reasons)}.",
                _suggest(profile, shape, time_seconds, requested),
            )
        return requested, "as asked"
    automatic = [name for name, partition in profile.partitions.items() if partition.auto]
    fitting = [name for name in automatic if not misfits(profile, name, shape, time_seconds)]
    whole = [name for name in fitting if profile.partitions[name].whole_nodes]
    if shape.nodes > 1 and whole:
        return whole[0], "whole nodes on several nodes"
    if fitting:
        return fitting[0], "the first partition that takes this request"
    reasons = [misfits(profile, name, shape, time_seconds)[0] for name in automatic]
    raise ScaletrainError(
        f"No partition of {profile.name} takes {shape} for {format_slurm_time(time_seconds)}: "
        f"{'; '.join(reasons) or 'none may be chosen automatically'}.",
        _suggest(profile, shape, time_seconds, None),
    )


def _whole_node_counts(gpus: int, node_gpus: int) -> str:
    """`--gpus 8 (1 node) or --gpus 16 (2 nodes)` around `gpus`."""
    nodes = {max(1, gpus // node_gpus), math.ceil(gpus / node_gpus)}
    return " or ".join(
        f"--gpus {count * node_gpus} ({count} node{'s' if count > 1 else ''})"
        for count in sorted(nodes)
    )


def _suggest(
    profile: ClusterProfile, shape: Shape, time_seconds: int, requested: str | None
) -> str:
    """Nearby requests that fit, as command-line options, best first (see `_rank`); an option
    that only adds changes to another one is left out."""
    node_gpus = profile.node.gpus
    gpu_counts = {
        shape.gpus,
        max(1, shape.gpus // node_gpus) * node_gpus,
        math.ceil(shape.gpus / node_gpus) * node_gpus,
        *(min(shape.gpus, profile.gpus_per_node_limit(name)) for name in profile.partitions),
        *(_most_gpus(profile, name, shape.gpus) for name in profile.partitions),
    } - {0}
    # (partition if it changes, GPUs) -> the longest time that fits
    longest: dict[tuple[str | None, int], int] = {}
    for name, partition in profile.partitions.items():
        if not partition.auto and name != requested:
            continue
        limit = partition.max_time_seconds
        seconds = time_seconds if limit is None else min(time_seconds, limit)
        for gpus in gpu_counts:
            # The count asked for keeps the shape asked for (--nodes 2 --gpus-per-node 6: no
            # --gpus is suggested with it); the others are counts --gpus spreads over whole
            # nodes, all of them one node or less, or whole nodes.
            if gpus == shape.gpus:
                candidate = shape
            else:
                candidate = (
                    Shape(1, gpus) if gpus <= node_gpus else Shape(gpus // node_gpus, node_gpus)
                )
            if not misfits(profile, name, candidate, seconds):
                key = (name if requested is not None and name != requested else None, gpus)
                longest[key] = max(longest.get(key, 0), seconds)
    changes = [
        _changes(partition, gpus, seconds, shape.gpus, time_seconds)
        for (partition, gpus), seconds in longest.items()
    ]
    useful = [
        change
        for change in changes
        if change and not any(other and other.items() < change.items() for other in changes)
    ]
    useful.sort(key=lambda change: _rank(change, shape.gpus))
    if not useful:
        return f"see `scaletrain clusters show {profile.name}` for its partitions and limits."
    texts = [" ".join(f"{option} {value}" for option, value in change.items()) for change in useful]
    return "ask for " + ", or ".join(texts[:_MAX_SUGGESTIONS]) + "."


def _most_gpus(profile: ClusterProfile, name: str, gpus: int) -> int:
    """The most GPUs, up to `gpus`, that partition `name` takes: its limits on GPUs, nodes
    and GPUs per node, in whole nodes beyond one node (0 if none)."""
    partition = profile.partitions[name]
    node_gpus, per_node = profile.node.gpus, profile.gpus_per_node_limit(name)
    most = min(gpus, partition.max_gpus or gpus, (partition.max_nodes or gpus) * node_gpus)
    if most > per_node:
        # Beyond one node only whole nodes; a partition that shares nodes stays on one.
        most = most // node_gpus * node_gpus if per_node == node_gpus else per_node
    if partition.whole_nodes:
        most = most // node_gpus * node_gpus
    return most


def _changes(
    partition: str | None, gpus: int, seconds: int, asked_gpus: int, asked_seconds: int
) -> dict[str, str]:
    """The options that differ from the request, in command-line order."""
    change = {}
    if partition is not None:
        change["--partition"] = partition
    if gpus != asked_gpus:
        change["--gpus"] = str(gpus)
    if seconds != asked_seconds:
        change["--time"] = f"{format_slurm_time(seconds)} (resume from a checkpoint)"
    return change


def _rank(change: dict[str, str], asked_gpus: int) -> tuple[bool, int, int, str]:
    """Fewer GPUs than asked is the last resort; then fewest changes, then nearest count."""
    gpus = int(change.get("--gpus", asked_gpus))
    return gpus < asked_gpus, len(change), abs(gpus - asked_gpus), str(change)
