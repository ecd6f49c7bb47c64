"""Draft a cluster profile for an unknown site from what its Slurm says about itself.

Slurm knows the nodes (cores, memory, GPUs as generic resources) and partitions (time and
node limits); it does not know the billing rule, the CPU masks closest to each GPU, the
network settings or how to load PyTorch. The draft fills in what Slurm knows, is checked
against the profile schema, and lists what the user still has to add.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from importlib.resources import files
from typing import Any, Protocol

import jinja2
import tomli_w

from scaletrain.clusters.catalog import profile_from_text
from scaletrain.clusters.slurm_time import parse_slurm_time
from scaletrain.core.errors import ScaletrainError

# gpu[:type]:count inside a Gres string such as "gpu:v100:4(S:0-1),nvme:3600".
_GPU_GRES = re.compile(r"(?:^|,)gpu(?::(?P<type>[A-Za-z0-9_.-]+))?:(?P<count>\d+)")
# Words in GPU type names that tell the vendor (Slurm has no vendor field).
_AMD_WORDS = ("mi50", "mi100", "mi210", "mi250", "mi300", "gcd", "amd", "radeon")
_SLURM_UNSET_MEMORY_MB = 1  # Slurm's RealMemory when the site does not manage memory


class ReportedNode(Protocol):
    """What a draft reads of one node of `scontrol show node` (slurm.output.SlurmNode):
    named here so that cluster knowledge needs nothing from the Slurm layer."""

    @property
    def name(self) -> str: ...
    @property
    def cpus(self) -> int: ...
    @property
    def real_memory_mb(self) -> int: ...
    @property
    def gres(self) -> str: ...
    @property
    def partitions(self) -> tuple[str, ...]: ...


class ReportedPartition(Protocol):
    """What a draft reads of one partition of `scontrol show partition`
    (slurm.output.SlurmPartition)."""

    @property
    def name(self) -> str: ...
    @property
    def max_time(self) -> str: ...
    @property
    def max_nodes(self) -> str: ...


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeType:
    """What a job can use on one kind of node."""

    cpus: int
    memory_gb: int | None
    gpus: int
    gpu_type: str

    def describe(self) -> str:
        gpus = f"{self.gpus} × {self.gpu_type or 'gpu'}" if self.gpus else "no GPUs"
        memory = f"{self.memory_gb} GB" if self.memory_gb else "memory not managed"
        return f"{self.cpus} cores, {memory}, {gpus}"


@dataclass(frozen=True, kw_only=True, slots=True)
class DraftProfile:
    name: str
    text: str
    """The profile as TOML, with comments where the user must check or add something."""
    node_type: NodeType
    partitions: tuple[str, ...]
    skipped: tuple[str, ...]
    """Partitions left out because their nodes differ, with their node type."""


def node_type(node: ReportedNode) -> NodeType:
    match = _GPU_GRES.search(node.gres)
    memory_mb = node.real_memory_mb
    return NodeType(
        cpus=node.cpus,
        memory_gb=memory_mb // 1024 if memory_mb > _SLURM_UNSET_MEMORY_MB else None,
        gpus=int(match["count"]) if match else 0,
        gpu_type=(match["type"] or "") if match else "",
    )


def accelerator_of(gpu_type: str) -> str:
    """'amd' or 'nvidia' from a Slurm GPU type name; NVIDIA when it cannot tell."""
    lowered = gpu_type.lower()
    if any(word in lowered for word in _AMD_WORDS):
        return "amd"
    return "nvidia"


def _limit(text: str) -> str | None:
    """A Slurm limit as the schema wants it, or None for UNLIMITED/unreadable."""
    try:
        parse_slurm_time(text)
    except ScaletrainError:
        return None
    return text


def _toml_value(value: Any) -> str:
    return tomli_w.dumps({"value": value}).split("=", 1)[1].strip()


def draft_profile(
    name: str, partitions: Sequence[ReportedPartition], nodes: Sequence[ReportedNode]
) -> DraftProfile:
    """A profile for the most common kind of GPU node (any node on a CPU-only site)."""
    if not nodes or not partitions:
        raise ScaletrainError(
            "Slurm lists no nodes or no partitions here.",
            "run this on a login node of the cluster, where `sinfo` shows its partitions.",
        )
    types = {node.name: node_type(node) for node in nodes}
    gpu_nodes = [kind for kind in types.values() if kind.gpus]
    chosen = Counter(gpu_nodes or types.values()).most_common(1)[0][0]
    kept: list[ReportedPartition] = []
    skipped: list[str] = []
    for partition in partitions:
        members = [types[node.name] for node in nodes if partition.name in node.partitions]
        common = Counter(members).most_common(1)[0][0] if members else None
        if common == chosen:
            kept.append(partition)
        else:
            skipped.append(f"{partition.name} ({common.describe() if common else 'no nodes'})")
    text = _template().render(
        name=name,
        node=chosen,
        accelerator=accelerator_of(chosen.gpu_type) if chosen.gpus else "cpu",
        # On a CPU-only site every core is a process slot, as in the `local` profile.
        slots=chosen.gpus or chosen.cpus,
        partitions=[(partition, _limit(partition.max_time)) for partition in kept],
        max_nodes={p.name: int(p.max_nodes) for p in kept if p.max_nodes.isdigit()},
        skipped=skipped,
    )
    profile_from_text(name, text, where=f"the draft profile for {name}")  # fails loudly if invalid
    return DraftProfile(
        name=name,
        text=text,
        node_type=chosen,
        partitions=tuple(partition.name for partition in kept),
        skipped=tuple(skipped),
    )


def _template() -> jinja2.Template:
    source = (
        files("scaletrain.clusters").joinpath("draft_profile.toml.j2").read_text(encoding="utf-8")
    )
    environment = jinja2.Environment(
        undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False
    )
    environment.filters["toml"] = _toml_value
    return environment.from_string(source)
