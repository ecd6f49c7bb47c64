"""benchmarks/checkpoint_cost.py divides the bytes of one checkpoint by the time it took to
save and load it: each round must count that checkpoint alone, not every one kept. The
guide's figures are those of the committed results."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.conftest import PROCESS_TIMEOUT_S, REPO, clean_environ

pytestmark = pytest.mark.multiprocess

BENCHMARK = REPO / "benchmarks" / "checkpoint_cost.py"
# A checkpoint holds the state's tensors and a little more: DCP's metadata, torch.save's
# headers, Adam's step counts, each rank's generators, the manifest.
OVERHEAD = 0.05


def test_each_round_counts_the_bytes_of_one_checkpoint_of_the_state(tmp_path: Path) -> None:
    out = tmp_path / "cost.json"
    # Three rounds: the run keeps three checkpoints, so a count of the folder would triple.
    options = ["--layers", "1", "--width", "512", "--rounds", "3", "--ranks", "1"]
    command = [sys.executable, str(BENCHMARK), *options, "--window", "2"]
    result = subprocess.run(
        [*command, f"--dir={tmp_path}", f"--out={out}"],
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT_S,
        env=clean_environ(),
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    record = json.loads(out.read_text())
    state = record["settings"]["state_mb"] * 1e6
    counted = [one["throughput"]["bytes"] for one in record["by_ranks"]["1"]["rounds"]]
    for number, sizes in enumerate(counted):
        for name, size in sizes.items():
            assert state <= size <= state * (1 + OVERHEAD), (number, name, size, state)


def figures_module() -> ModuleType:
    path = REPO / "benchmarks" / "checkpoint_figures.py"
    spec = importlib.util.spec_from_file_location("checkpoint_figures", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_guide_gives_the_figures_of_the_committed_results() -> None:
    figures = figures_module()
    guide = figures.GUIDE.read_text(encoding="utf-8")
    assert figures.block_in(guide) == figures.figures(), (
        "docs/checkpoints.md's figures differ from benchmarks/results/checkpoint_cost*.json: "
        "run `python benchmarks/checkpoint_figures.py`"
    )
    # Nowhere else in the guide a measured rate, time or ratio that no test checks; the
    # README sends readers to the guide for what a checkpoint costs.
    rest = guide.replace(figures.block_in(guide), "")
    assert not re.findall(r"MB/s|GB/s|\d\.\d+ s\b|\d\.\d+ ?×", rest)
    assert "MB/s" not in (REPO / "README.md").read_text(encoding="utf-8")
