"""The planner against the sites' own sbatch examples (seeds 000 and 004), one by one."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from scaletrain.clusters.catalog import load_profile
from scaletrain.core.toml_text import parse_toml
from scaletrain.launch.job_script import resource_options
from scaletrain.planning.planner import plan_job
from scaletrain.planning.request import Request
from tests.conftest import REPO

EXAMPLES = parse_toml((REPO / "tests/fixtures/seed_sbatch_examples.toml").read_text())["example"]
# The seeds' job-script lines, copied verbatim from ../shared/seeds/ (see each file's header).
SEEDS = REPO / "tests" / "fixtures" / "seeds"

# `#SBATCH --key=value`, also as the slides' PDF text prints it: `#SBATCH -- key=value`,
# `#SBATCHkey=value`.
_OPTION = re.compile(r"#SBATCH\s*(?:--\s*)?([a-z-]+)=(\S+)")


def sbatch_options(text: str) -> list[tuple[str, str]]:
    return [(key, value) for key, value in _OPTION.findall(text) if key != "account"]


def resources(options: list[tuple[str, str]]) -> dict[str, Any]:
    """What Slurm allocates, whichever way the options say it (`--ntasks=1` on one node
    is `--nodes=1 --ntasks-per-node=1`)."""
    given = dict(options)
    nodes = int(given.get("nodes", 1))
    tasks_per_node = int(given.get("ntasks-per-node", int(given.get("ntasks", nodes)) // nodes))
    return {
        "partition": given["partition"],
        "nodes": nodes,
        "tasks_per_node": tasks_per_node,
        "cpus_per_task": int(given["cpus-per-task"]),
        "memory": given.get("mem"),
        "gpus": given.get("gres") or given.get("gpus-per-node"),
        "time": given["time"],
    }


@pytest.mark.parametrize("example", EXAMPLES, ids=[example["title"] for example in EXAMPLES])
def test_plan_asks_for_what_the_site_example_asks_for(example: dict[str, Any]) -> None:
    request = Request(script="myprog.py", **example["request"])
    plan = plan_job(request, load_profile(request.cluster, {}))
    expected = resources(sbatch_options(example["sbatch"]))
    # Flags without a value (--exclusive, which LUMI's CPU masks need on a full small-g node)
    # allocate nothing more.
    valued = [option for option in resource_options(plan) if "=" in option]
    assert resources([tuple(option[2:].split("=", 1)) for option in valued]) == expected


@pytest.mark.parametrize("example", EXAMPLES, ids=[example["title"] for example in EXAMPLES])
def test_expected_lines_are_quoted_from_the_seed(example: dict[str, Any]) -> None:
    seed: Path = SEEDS / example["seed"]
    in_seed = sbatch_options(seed.read_text(encoding="utf-8"))
    quoted = sbatch_options(example["sbatch"])
    assert any(in_seed[start : start + len(quoted)] == quoted for start in range(len(in_seed))), (
        f"{example['title']}: these lines are not in {seed.name} in this order"
    )


def test_partition_is_given_only_where_the_seed_differs_from_the_planners_choice() -> None:
    for example in EXAMPLES:
        if "partition" in example["request"]:
            automatic = {**example["request"]}
            seed_partition = automatic.pop("partition")
            plan = plan_job(
                Request(script="x.py", **automatic), load_profile(automatic["cluster"], {})
            )
            assert plan.partition != seed_partition, example["title"]
