"""The sampler ends with the process it watches, even when that process ends first."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.conftest import clean_environ

SAMPLER = [sys.executable, "-m", "scaletrain.observe.monitor.sampler", "--interval", "0.2"]


def test_the_sampler_ends_with_the_process_it_watches(tmp_path: Path) -> None:
    watched = subprocess.Popen(["sleep", "2"])
    sampler = subprocess.Popen(
        [*SAMPLER, "--run-dir", str(tmp_path), "--watch", str(watched.pid)], env=clean_environ()
    )
    try:
        watched.wait(timeout=30)
        started = time.monotonic()
        assert sampler.wait(timeout=30) == 0
        assert time.monotonic() - started < 10
    finally:
        sampler.kill()
        watched.kill()
    lines = next(tmp_path.glob("metrics/monitor-*.jsonl")).read_text().splitlines()
    assert lines  # it sampled while the process lived


def test_a_sampler_whose_launcher_already_ended_does_not_linger(tmp_path: Path) -> None:
    ended = subprocess.Popen(["true"])
    ended.wait(timeout=30)
    for watch in (str(ended.pid), "1"):  # a pid that is gone, or init (an orphan's parent)
        result = subprocess.run(
            [*SAMPLER, "--run-dir", str(tmp_path), "--watch", watch],
            env=clean_environ(), timeout=30, check=False,
        )  # fmt: skip
        assert result.returncode == 0
