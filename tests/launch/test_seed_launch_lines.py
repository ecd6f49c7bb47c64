"""Generated launch lines against the sites' own (seed 004), one example at a time."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from scaletrain.core.toml_text import parse_toml
from tests.conftest import REPO
from tests.support.job_scripts import launch_lines, plan_for, render

EXAMPLES = parse_toml((REPO / "tests/fixtures/seed_launch_lines.toml").read_text())["example"]
# The seeds' job-script lines, copied verbatim from ../shared/seeds/ (see each file's header).
SEEDS = REPO / "tests" / "fixtures" / "seeds"
IDS = [example["title"] for example in EXAMPLES]


def one_line(text: str) -> str:
    """Continuation lines joined and runs of spaces collapsed, as the shell reads a command."""
    return re.sub(r"\s+", " ", text.replace("\\\n", " "))


def rendered(example: dict[str, Any]) -> tuple[str, str]:
    """(training launch line, per-task code) that scaletrain writes for the example, without
    the monitor's sampler (tests/observe checks that it leaves the launch line as it is)."""
    plan = plan_for(script="myprog.py", time="1:00:00", **example["request"])
    script = render(plan, monitor_interval_s=None)
    in_task = re.search(r"^in_task=('.*?')$", script, re.MULTILINE | re.DOTALL)
    return launch_lines(script)[-1], shlex.split(in_task.group(1))[0] if in_task else ""


@pytest.mark.parametrize("example", EXAMPLES, ids=IDS)
def test_seed_line_is_quoted_from_the_seed(example: dict[str, Any]) -> None:
    seed: Path = SEEDS / example["seed"]
    assert example["seed_line"] in one_line(seed.read_text(encoding="utf-8"))


@pytest.mark.parametrize("example", EXAMPLES, ids=IDS)
def test_launch_line_has_the_seeds_shape(example: dict[str, Any]) -> None:
    line, in_task = rendered(example)
    assert line == example["line"]
    assert in_task == example.get("in_task", "").lstrip("\n")
    # The words the task's shell sees: the seed's escaped \$SLURM_NODEID is $SLURM_NODEID there.
    ours = shlex.split(line) + shlex.split(in_task)
    seeds = shlex.split(example["seed_line"].replace("\\$", "$"))
    seeds = [word for part in seeds for word in part.split()]  # RUN_CMD="..." holds a command
    for word in example["shared"]:
        assert word in ours and word in seeds, word
