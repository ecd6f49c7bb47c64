"""`scaletrain scale` on a plain PyTorch DDP script: 1, 2 and 4 local processes, and 1 and 2
nodes of the real test Slurm; the billing shown (and bounded) before anything runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from scaletrain.observe.monitor.samples import read_run_samples
from tests.conftest import WORKERS, scaletrain
from tests.support.slurm_cluster import SlurmCluster
from tests.support.slurm_jobs import job_environ

STUDY = ("--steps", "6", "--warmup", "2", "--batch", "64", "--name", "study")
SCRIPT = ("train.py", "--batch-size", "{batch}")


def script_in(folder: Path) -> None:
    shutil.copy(WORKERS / "plain_ddp.py", folder / "train.py")


def check_study(folder: Path, sizes: list[int], processes: list[int], output: str) -> None:
    """The table, the prediction with its error, and the report with its plots."""
    study = json.loads((folder / "report" / "scaling.json").read_text())
    assert [p["size"] for p in study["points"]] == sizes
    assert [p["processes"] for p in study["points"]] == processes
    predicted = [row["size"] for row in study["rows"] if row["predicted"]]
    assert predicted == [sizes[-1] * 2, sizes[-1] * 4, sizes[-1] * 8]
    for point in study["points"]:
        assert point["step_s"] > 0 and point["compute_s"] > 0
        # strong scaling at a global batch of 64: 64 samples per step at every size
        assert point["throughput"] == pytest.approx(64 / point["step_s"])
    assert len(study["fit_errors"]) == len(sizes)
    assert "Error of the fit at the measured sizes" in output
    assert f"| {sizes[-1] * 8} (predicted) |" in output
    report = (folder / "report" / "scaling.md").read_text()
    for plot in ("scaling-throughput.png", "scaling-efficiency.png", "scaling-breakdown.png"):
        assert f"]({plot})" in report and (folder / "report" / plot).stat().st_size > 0


@pytest.mark.multiprocess
def test_local_study_at_one_two_and_four_processes(tmp_path: Path) -> None:
    script_in(tmp_path)
    result = scaletrain("scale", "--sizes", "1,2,4", *STUDY, *SCRIPT, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    folder = tmp_path / "runs" / "study"
    check_study(folder, [1, 2, 4], [1, 2, 4], result.stdout)  # the table is the result
    for size in (1, 2, 4):  # every rank of every size was profiled
        assert len(list((folder / "sizes" / f"n{size}" / "traces").glob("rank-*"))) == size


def test_the_plan_shows_and_bounds_what_the_study_bills(tmp_path: Path) -> None:
    script_in(tmp_path)
    shown = scaletrain(
        "scale", "-c", "lumi", "--sizes", "1,2", "-t", "0:20:00", "--dry-run", *STUDY, *SCRIPT,
        cwd=tmp_path,
    )  # fmt: skip
    assert shown.returncode == 0, shown.stderr
    # LUMI standard-g bills whole nodes: 4 units per node-hour, 20 minutes each.
    assert "what the study may bill" in shown.stdout
    assert "at most 4 GPU-hours" in shown.stdout
    assert not (tmp_path / "runs" / "study" / "sizes").exists()
    refused = scaletrain(
        "scale", "-c", "lumi", "--sizes", "1,2", "-t", "0:20:00", "--budget", "3", *STUDY,
        *SCRIPT, cwd=tmp_path,
    )  # fmt: skip
    assert refused.returncode == 2
    assert "more than --budget 3" in refused.stderr and "HINT:" in refused.stderr


@pytest.mark.slurm
@pytest.mark.multiprocess
def test_slurm_study_on_one_and_two_nodes(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    script_in(tmp_path)
    environ = job_environ(slurm_cluster, tmp_path)
    result = scaletrain(
        "scale", "-c", "local", "--sizes", "1,2", "--gpus-per-node", "2", "-t", "10:00",
        "--no-check", *STUDY, *SCRIPT, cwd=tmp_path, environ=environ,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    folder = tmp_path / "runs" / "study"
    check_study(folder, [1, 2], [2, 4], result.stdout)
    # Each node's first task sampled its node: both nodes, with their ranks.
    samples = read_run_samples(folder / "sizes" / "n2" / "metrics")
    assert sorted(samples) == ["n1", "n2"]
    ranks = {host: {r.rank for s in found for r in s.ranks} for host, found in samples.items()}
    assert ranks["n1"] | ranks["n2"] == {0, 1, 2, 3} and not ranks["n1"] & ranks["n2"]
