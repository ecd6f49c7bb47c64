"""`scaletrain cost` on a real run of the test Slurm with accounting: a crash (torchrun restarts
the processes) and a requeue, and the numbers checked by hand against sacct's own output."""

from __future__ import annotations

import json
import os
import signal
from datetime import datetime
from pathlib import Path

import pytest

from scaletrain.core.rank_files import read_beats
from scaletrain.slurm import commands as slurm
from tests.conftest import WORKERS, scaletrain
from tests.support.slurm_cluster import SlurmCluster
from tests.support.slurm_jobs import finished, job_environ, submit, submit_options
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.slurm, pytest.mark.multiprocess]

PACKAGED_LOCAL = Path(__file__).parents[3] / "src/scaletrain/clusters/profiles/local.toml"
# The test cluster's profile with a price: 60 units per GPU-hour (a unit per GPU-minute).
UNITS_PER_GPU_HOUR = 60
STEPS_PER_EPOCH = 256 // 16  # resumable.py: 256 samples, a global batch of 16


def billed_profile(config: Path) -> None:
    """The packaged `local` profile with a billing rule, as a user's own profile of that name."""
    text = PACKAGED_LOCAL.read_text().replace(
        "max_nodes = 2\n",
        f'max_nodes = 2\nbilling = {{ rule = "sum", units_per_gpu_hour = {UNITS_PER_GPU_HOUR} }}\n',
    )
    folder = config / "scaletrain" / "clusters"
    folder.mkdir(parents=True)
    (folder / "local.toml").write_text(text + '\n[billing]\nunit = "units"\n')


def json_lines(path: Path) -> list[dict]:
    return [
        json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()
    ]


def test_cost_of_a_run_with_a_crash_and_a_requeue_matches_sacct(
    accounting_cluster: SlurmCluster, tmp_path: Path
) -> None:
    cluster = accounting_cluster
    environ = job_environ(cluster, tmp_path)
    billed_profile(tmp_path / "config")
    name = "costly"
    # 3 epochs of 16 steps at 0.2 s a step, a checkpoint every 5 steps, one record a step.
    args = (str(WORKERS / "resumable.py"), "--out", f"runs/{name}/out", "--epochs", "3",
            "--step-seconds", "0.2", "--every-steps", "5")  # fmt: skip
    options = submit_options(name, "torchrun", 1, 1, "--no-check")
    folder, job_id = submit(cluster, tmp_path, environ, options, *args)
    history = folder.metrics / "train.jsonl"

    def steps() -> list[int]:
        return [record["step"] for record in json_lines(history)] if history.is_file() else []

    # A crash: the training process killed past its second checkpoint; torchrun restarts it.
    wait_until(lambda: max(steps(), default=0) >= 12, "step 12", cluster)
    os.kill(read_beats(folder)[0].pid, signal.SIGKILL)
    wait_until(lambda: folder.resumes.is_file(), "the restart's resume", cluster)
    resumed = json_lines(folder.resumes)[0]["step"]
    # A requeue: what Slurm sends before the time limit, 3 steps after the restart resumed.
    wait_until(lambda: steps()[-1] >= resumed + 3 > steps()[-2], "3 steps more", cluster)
    slurm.cancel(job_id, environ=environ, signal="USR1", batch_only=True)
    output = finished(cluster, folder, job_id)

    result = scaletrain("cost", "--json", name, cwd=tmp_path, environ=environ)
    assert result.returncode == 0, result.stderr
    cost = json.loads(result.stdout)

    # By hand, from sacct itself: every run of the job, billed at 1 GPU × 60 units per hour.
    accounted = cluster.run(
        ["sacct", "-j", job_id, "--duplicates", "--allocations", "--noheader", "--parsable2",
         "--format=State,ElapsedRaw,Start,End"],
        env={"SLURM_TIME_FORMAT": "%s"}, cwd=tmp_path,
    ).stdout.split()  # fmt: skip
    runs = [line.split("|") for line in accounted]
    assert [state for state, *_ in runs] == ["REQUEUED", "COMPLETED"], (accounted, output)
    per_second = UNITS_PER_GPU_HOUR / 3600
    billed = [int(elapsed) for _, elapsed, _, _ in runs]
    assert cost["units_per_hour"] == UNITS_PER_GPU_HOUR
    assert cost["planned"]["units"] == pytest.approx(UNITS_PER_GPU_HOUR * 10 / 60)
    assert cost["used"]["seconds"] == sum(billed)
    assert cost["used"]["units"] == pytest.approx(sum(billed) * per_second)
    assert [a["units"] for a in cost["attempts"]] == pytest.approx([s * per_second for s in billed])

    # Lost, by hand: the crash lost the steps after the checkpoint it resumed from, until the
    # restart resumed; the requeue lost the time after its stop step until the run's end.
    records = json_lines(history)
    # Each start of the processes begins a new st.Progress, whose elapsed_s starts again.
    new = [
        i for i in range(1, len(records)) if records[i]["elapsed_s"] < records[i - 1]["elapsed_s"]
    ]
    assert len(new) == 2, records
    first, second = records[: new[0]], records[new[0] : new[1]]
    resumes = json_lines(folder.resumes)
    assert [r["step"] for r in resumes] == [resumed, second[-1]["step"]], resumes
    when = {r["step"]: r["time"] for r in first}
    crash_lost = datetime.fromisoformat(resumes[0]["time"]).timestamp() - when[resumed]
    stop_lost = int(runs[0][3]) - second[-1]["time"]
    assert first[-1]["step"] > resumed and crash_lost > 0 and stop_lost > 0
    assert cost["attempts"][0]["lost_s"] == pytest.approx(crash_lost + stop_lost, abs=1e-6)
    assert cost["attempts"][1]["lost_s"] == 0
    assert cost["lost"]["units"] == pytest.approx((crash_lost + stop_lost) * per_second)

    total_steps = 3 * STEPS_PER_EPOCH
    assert (cost["steps"], cost["steps_per_epoch"]) == (total_steps, STEPS_PER_EPOCH)
    per_1000 = sum(billed) * per_second / total_steps * 1000
    assert cost["per_1000_steps"]["units"] == pytest.approx(per_1000)
    assert cost["per_epoch"]["units"] == pytest.approx(per_1000 * STEPS_PER_EPOCH / 1000)
    # The test cluster measures no energy (no acct_gather_energy plugin) and has no GPUs.
    assert cost["energy"]["site_joules"] is None and cost["gpus"] is None

    # `status` after the job: the same figures, and one line of them.
    status = json.loads(scaletrain("status", "--json", name, cwd=tmp_path, environ=environ).stdout)
    assert status["cost"]["used"] == cost["used"] and status["cost"]["lost"] == cost["lost"]
    assert status["cost"]["summary"].startswith(f"{cost['used']['units']:.3g} units used of 10")

    shown = scaletrain("cost", "--plot", "cost.png", name, cwd=tmp_path, environ=environ)
    assert shown.returncode == 0 and shown.stdout == "", shown.stderr
    print(shown.stderr)
    assert f"run {name}: {status['cost']['summary']}" in shown.stderr
    assert "│ energy          │ not reported by this site" in shown.stderr
    assert (tmp_path / "cost.png").stat().st_size > 0
