"""Billing rules as data: each site's formula for what one hour of an allocation costs.

A rule sees the whole allocation (nodes, GPUs, cores and memory per node) because sites bill
for what others cannot use, not for what the job uses (LUMI: "billed for what someone else
cannot use anymore because of your resource request").
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Annotated, Literal

from scaletrain.clusters.constraints import (
    PositiveFloat,
    PositiveInt,
    Section,
    at_least,
    tagged_by,
)


@dataclass(frozen=True, kw_only=True, slots=True)
class Allocation:
    """What a job holds, per node; memory is None where the job does not ask for any."""

    nodes: int
    gpus_per_node: int
    cores_per_node: int
    memory_gb_per_node: int | None
    node_gpus: int
    """GPUs a whole node has (a whole-node rule bills for them all)."""

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node


@dataclass(frozen=True, kw_only=True, slots=True)
class LargestShareRule(Section):
    """LUMI small-g/dev-g: per GPU, or per slice of cores or memory if that is more."""

    rule: Literal["largest-share"]
    units_per_gpu_hour: PositiveFloat
    cores_per_gpu_slice: PositiveInt
    memory_gb_per_gpu_slice: PositiveInt

    def units_per_hour(self, allocation: Allocation) -> float:
        return self.units_per_gpu_hour * self._slices(allocation)[0]

    def gpu_share_per_hour(self, allocation: Allocation) -> float:
        return self.units_per_gpu_hour * allocation.gpus

    def arithmetic(self, allocation: Allocation) -> str:
        slices, terms = self._slices(allocation)
        return f"max({', '.join(terms)}) = {slices} × {self.units_per_gpu_hour:g}"

    def _slices(self, allocation: Allocation) -> tuple[int, list[str]]:
        cores = allocation.nodes * allocation.cores_per_node
        core_slices = math.ceil(cores / self.cores_per_gpu_slice)
        terms = [f"{allocation.gpus} GPUs", f"⌈{cores} cores/{self.cores_per_gpu_slice}⌉"]
        counts = [allocation.gpus, core_slices]
        if allocation.memory_gb_per_node is not None:
            memory = allocation.nodes * allocation.memory_gb_per_node
            counts.append(math.ceil(memory / self.memory_gb_per_gpu_slice))
            terms.append(f"⌈{memory} GB/{self.memory_gb_per_gpu_slice} GB⌉")
        return max(counts), terms


@dataclass(frozen=True, kw_only=True, slots=True)
class WholeNodeRule(Section):
    """LUMI standard-g: every allocated node is billed in full."""

    rule: Literal["whole-node"]
    units_per_node_hour: PositiveFloat

    def units_per_hour(self, allocation: Allocation) -> float:
        return self.units_per_node_hour * allocation.nodes

    def gpu_share_per_hour(self, allocation: Allocation) -> float:
        return self.units_per_node_hour * allocation.gpus / allocation.node_gpus

    def arithmetic(self, allocation: Allocation) -> str:
        return f"{allocation.nodes} nodes × {self.units_per_node_hour:g}"


@dataclass(frozen=True, kw_only=True, slots=True)
class SumRule(Section):
    """Puhti, Mahti: a price per GPU, plus per core and per GB of memory where the site
    bills those too."""

    rule: Literal["sum"]
    units_per_gpu_hour: PositiveFloat
    units_per_core_hour: Annotated[float, at_least(0)] = 0.0
    units_per_gb_hour: Annotated[float, at_least(0)] = 0.0

    def units_per_hour(self, allocation: Allocation) -> float:
        cores = allocation.nodes * allocation.cores_per_node
        memory = allocation.nodes * (allocation.memory_gb_per_node or 0)
        return (
            allocation.gpus * self.units_per_gpu_hour
            + cores * self.units_per_core_hour
            + memory * self.units_per_gb_hour
        )

    def gpu_share_per_hour(self, allocation: Allocation) -> float:
        return allocation.gpus * self.units_per_gpu_hour

    def arithmetic(self, allocation: Allocation) -> str:
        terms = [f"{allocation.gpus} GPUs × {self.units_per_gpu_hour:g}"]
        if self.units_per_core_hour:
            cores = allocation.nodes * allocation.cores_per_node
            terms.append(f"{cores} cores × {self.units_per_core_hour:g}")
        if self.units_per_gb_hour and allocation.memory_gb_per_node is not None:
            memory = allocation.nodes * allocation.memory_gb_per_node
            terms.append(f"{memory} GB × {self.units_per_gb_hour:g}")
        return " + ".join(terms)


BillingRule = Annotated[LargestShareRule | WholeNodeRule | SumRule, tagged_by("rule")]


def describe_rule(rule: BillingRule, unit: str) -> str:
    """The rule in one sentence, for `scaletrain clusters show`."""
    if isinstance(rule, LargestShareRule):
        return (
            f"{rule.units_per_gpu_hour:g} {unit} per hour for each GPU, or for each "
            f"{rule.cores_per_gpu_slice} cores or {rule.memory_gb_per_gpu_slice} GB if that is more"
        )
    if isinstance(rule, WholeNodeRule):
        return f"{rule.units_per_node_hour:g} {unit} per hour for each node, whole nodes"
    prices = [
        f"{price:g} for each {what}"
        for price, what in (
            (rule.units_per_gpu_hour, "GPU"),
            (rule.units_per_core_hour, "core"),
            (rule.units_per_gb_hour, "GB of memory"),
        )
        if price
    ]
    return f"{unit} per hour: " + ", plus ".join(prices)
