"""One run's cost from its folder and Slurm's runs: units from the plan's rate, the step the
run has to show, per 1,000 steps and per epoch, and the JSON of `scaletrain cost --json`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from scaletrain.core.run_folder import RunFolder
from scaletrain.observe.cost.report import run_cost
from scaletrain.slurm.output import AccountedRun
from tests.support.job_scripts import plan_for


def write_history(folder: RunFolder, steps: int, *, began: float) -> None:
    """train.jsonl of one start: a step a second, 16 steps an epoch."""
    folder.create()
    with (folder.metrics / "train.jsonl").open("w") as file:
        for step in range(1, steps + 1):
            record = {"step": step, "epoch": (step - 1) // 16, "elapsed_s": step,
                      "time": began + step}  # fmt: skip
            file.write(json.dumps(record) + "\n")


def accounted(state: str, start: float, end: float) -> AccountedRun:
    return AccountedRun(job_id="9", state=state, start=start, end=end,
                        elapsed_s=int(end - start), nodes=2, energy_joules=None)  # fmt: skip


def test_units_are_slurm_time_at_the_plans_rate(tmp_path: Path) -> None:
    # LUMI standard-g, 2 whole nodes: 2 × 4 = 8 GPU-hours per hour, 16 for the 2 hours asked.
    plan = plan_for(cluster="lumi", gpus=16, time="2:00:00")
    assert plan.billing is not None and plan.billing.units_per_hour == 8
    folder = RunFolder(tmp_path / "mnist")
    write_history(folder, 64, began=1000)  # steps 1-64 at 1001-1064, 4 epochs
    # 30 min billed, all of it kept.
    cost = run_cost(folder, plan, [accounted("COMPLETED", 900, 2700)])
    data = cost.to_dict()
    assert data["unit"] == "GPU-hours" and data["planned"]["units"] == 16
    assert data["used"] == {"units": pytest.approx(4.0), "seconds": 1800}
    assert data["lost"] == {"units": 0.0, "seconds": 0.0}
    assert (data["steps"], data["steps_per_epoch"]) == (64, 16)
    # 4 GPU-hours over 64 steps: 62.5 per 1,000 steps, 1 per epoch of 16.
    assert data["per_1000_steps"]["units"] == pytest.approx(62.5)
    assert data["per_epoch"] == {"units": pytest.approx(1.0), "seconds": pytest.approx(450)}
    assert data["energy"]["site_joules"] is None and data["gpus"] is None
    json.dumps(data)  # plain data

    # A second job of the run, cancelled while it waited, was billed nothing: no attempt.
    cancelled = accounted("CANCELLED", 2800, 2800)
    assert len(run_cost(folder, plan, [accounted("COMPLETED", 900, 2700), cancelled]).attempts) == 1
    failed = run_cost(folder, plan, [accounted("FAILED", 900, 2700)])
    # No checkpoint: a new start trains from step 0 again; everything was lost.
    assert (failed.steps, failed.lost_s, failed.per_steps(1000)) == (0, 1800, None)


def test_a_profile_without_billing_gives_times_only(tmp_path: Path) -> None:
    plan = plan_for(cluster="local", gpus=2, time="10:00")
    folder = RunFolder(tmp_path / "here")
    write_history(folder, 10, began=0)
    cost = run_cost(folder, plan, [accounted("COMPLETED", 0, 20)])
    assert (cost.unit, cost.units(cost.used_s), cost.per_steps(1000)) == (None, None, 2000)
