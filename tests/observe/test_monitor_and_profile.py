"""The MNIST example on 2 local ranks, sampled and profiled: `scaletrain monitor` while it
runs and afterwards, and `scaletrain analyze` on its real 2-rank profile (gloo on CPU)."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from scaletrain.core.run_folder import RunFolder
from scaletrain.observe.monitor.samples import read_run_samples
from tests.conftest import end_session, scaletrain, start_scaletrain
from tests.support.slurm_jobs import EXAMPLE

pytestmark = pytest.mark.multiprocess

# Long enough to be caught running; the test stops it as soon as it has seen it.
EPOCHS = "40"
WAIT_S = 120.0


def wait_for_two_ranks(folder: RunFolder) -> None:
    deadline = time.monotonic() + WAIT_S
    while time.monotonic() < deadline:
        samples = read_run_samples(folder.metrics) if folder.metrics.is_dir() else {}
        ranks = {r.rank for node in samples.values() for s in node[-1:] for r in s.ranks}
        if ranks == {0, 1} and (folder.traces / "rank-1.pt.trace.json").is_file():
            return
        time.sleep(0.5)
    raise AssertionError(f"no samples of ranks 0 and 1 in {folder.metrics} after {WAIT_S} s")


def test_monitor_a_live_run_then_summarize_and_analyze_its_profile(
    tmp_path: Path, mnist_data: Path
) -> None:
    folder = RunFolder(tmp_path / "runs" / "mnist")
    run = start_scaletrain(
        "run", "--nproc", "2", "--name", "mnist", "--monitor-interval", "0.5",
        "--profile", "all:2,1,3", str(EXAMPLE), "--data-dir", str(mnist_data),
        "--epochs", EPOCHS, cwd=tmp_path, log=tmp_path / "run.log",
    )  # fmt: skip
    try:
        wait_for_two_ranks(folder)
        live = scaletrain("monitor", "mnist", "--once", cwd=tmp_path)
        # Stop the run the way a job's time limit does: it saves a checkpoint and ends.
        folder.stop_request.write_text("test\n")
        assert end_session(run) == 0, (tmp_path / "run.log").read_text()[-3000:]
    finally:
        if run.poll() is None:
            end_session(run, timeout=1)
    assert live.returncode == 0, live.stderr
    # The view is the command's result (stdout); notes go to stderr.
    assert "mnist: 1 node(s), 2 rank(s), live" in live.stdout
    assert "rank 0 (CPU, with its workers)" in live.stdout
    assert "rank 1 (CPU, with its workers)" in live.stdout

    after = scaletrain("monitor", "mnist", cwd=tmp_path)
    assert after.returncode == 0, after.stderr
    assert "live" not in after.stdout and "s sampled (means; memory: peaks)" in after.stdout
    assert (folder.report / "monitor.png").stat().st_size > 0
    summary = json.loads(scaletrain("monitor", "mnist", "--json", cwd=tmp_path).stdout)
    assert summary["live"] is False and len(summary["nodes"]) == 1
    assert sorted(rank["rank"] for rank in summary["ranks"]) == [0, 1]
    assert list((folder.metrics / "tensorboard").rglob("events.out.tfevents.*"))

    analysis = scaletrain("analyze", "mnist", cwd=tmp_path)
    assert analysis.returncode == 0, analysis.stderr
    assert "Trace analysis of 2 rank(s)" in analysis.stdout and "CPU (gloo)" in analysis.stdout
    report = json.loads((folder.report / "analysis.json").read_text())
    for rank in report["breakdowns"]:
        # 3 profiled steps, the last left out; every part of the span is accounted for.
        assert rank["steps"] == 2
        assert rank["compute_us"] > 0 and rank["communication_us"] > 0
        parts = rank["compute_us"] + rank["non_compute_us"] + rank["idle_us"]
        assert parts == pytest.approx(rank["span_us"])
        assert 0 <= rank["overlap_us"] <= rank["communication_us"]
    # DDP's gradient all_reduce runs on gloo's threads; the top list names it.
    assert "gloo:all_reduce" in analysis.stdout
    assert (folder.report / "breakdown.png").stat().st_size > 0
