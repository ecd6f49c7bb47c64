"""Checks that need every rank's report: agreement, one GPU per rank, no idle GPUs."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from scaletrain.diagnose.preflight.results import (
    CheckResult,
    RankReport,
    compact_list,
    fail,
    ok,
    skip,
)

_ONE_LAUNCHER = (
    "start all ranks with one launcher and one set of variables; Slurm's tasks × torchrun's "
    "--nproc-per-node must equal the world size"
)
# How to make the ranks agree, per fact they disagree on.
_AGREE = {
    "world_size": _ONE_LAUNCHER,
    "master": _ONE_LAUNCHER,
    "launcher": _ONE_LAUNCHER,
    "torch_version": "give every node the same software: one image or module, and a venv "
    "on the shared file system, not a node-local copy of another torch",
}


def check_consistency(reports: Sequence[RankReport]) -> CheckResult:
    """All ranks agree on world size, master and launcher, and each rank appears once."""
    name, count = "consistency", len(reports)
    facts = [report.facts for report in reports]
    for label, field in (
        ("world size", "world_size"),
        ("master", "master"),
        ("launcher", "launcher"),
        ("torch version", "torch_version"),
    ):
        groups: dict[object, list[int]] = defaultdict(list)
        for fact in facts:
            groups[getattr(fact, field)].append(fact.rank)
        if len(groups) > 1:
            described = "; ".join(
                f"{value} on ranks {compact_list(r)}" for value, r in groups.items()
            )
            return fail(name, f"ranks disagree on the {label}: {described}", _AGREE[field])
    ranks = sorted(fact.rank for fact in facts)
    if ranks != list(range(count)) or facts[0].world_size != count:
        return fail(
            name,
            f"{count} processes joined with ranks {ranks}, world size {facts[0].world_size}",
            "each rank must be unique: do not set RANK by hand and use one launcher",
        )
    hosts = {fact.host for fact in facts}
    return ok(name, f"{count} ranks on {len(hosts)} host(s), master {facts[0].master}")


def check_device_sharing(
    reports: Sequence[RankReport], expected_per_node: int | None
) -> CheckResult:
    """No two ranks of a node on one GPU, and (when known) no GPU of a node left idle."""
    name = "gpu-per-rank"
    by_host: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for report in reports:
        if report.facts.device not in ("cpu", "?"):
            by_host[report.facts.host][report.facts.device].append(report.facts.rank)
    if not by_host:
        return skip(name, "no GPUs in use")
    for host, devices in sorted(by_host.items()):
        for device, ranks in devices.items():
            if len(ranks) > 1:
                return fail(
                    name,
                    f"ranks {compact_list(ranks)} on {host} all use GPU {device}",
                    "give each rank its own GPU: leave *_VISIBLE_DEVICES to Slurm "
                    "(--gpus-per-node) and choose cuda:<LOCAL_RANK>, or one GPU per task",
                )
        if expected_per_node and len(devices) < expected_per_node:
            return fail(
                name,
                f"{host} uses {len(devices)} of its {expected_per_node} GPUs; the others idle",
                f"start {expected_per_node} processes per node (--ntasks-per-node="
                f"{expected_per_node} or torchrun --nproc-per-node={expected_per_node})",
            )
    used = sum(len(devices) for devices in by_host.values())
    return ok(name, f"{used} GPU(s) on {len(by_host)} node(s), one per rank")


def job_checks(reports: Sequence[RankReport], expected_per_node: int | None) -> list[CheckResult]:
    return [check_consistency(reports), check_device_sharing(reports, expected_per_node)]
