"""Do healthy jobs pass their preflight on a loaded machine? Rounds of the README's job and
unconverted scripts in every launch mode (tests/support/load.py) on the test Slurm, with a
CPU hog on every core; each job's end state and preflight verdict go to
benchmarks/results/jobs_under_load.json.

    .venv/bin/python -m benchmarks.jobs_under_load --rounds 10      # as root: it starts Slurm

The test suite runs one round (tests/launch/test_under_load.py); this counts many.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks.common import save
from tests.support.load import LOADED_JOB_TIMEOUT_S, cpu_hogs, submit_round, wait_round
from tests.support.slurm_cluster import running_cluster
from tests.support.slurm_jobs import EXAMPLE


def mnist_data(folder: Path) -> Path:
    """The MNIST stand-in the README's job trains on."""
    spec = importlib.util.spec_from_file_location(
        "make_small_mnist", EXAMPLE.with_name("make_small_mnist.py")
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.write_small_mnist(folder)
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    options = parser.parse_args()
    rounds: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        (root / "mnist").mkdir()
        (root / "cluster").mkdir()
        data = mnist_data(root / "mnist")
        with running_cluster(root / "cluster") as cluster:
            for number in range(1, options.rounds + 1):
                folder = root / f"round-{number}"
                folder.mkdir()
                started = time.monotonic()
                with cpu_hogs(seconds=LOADED_JOB_TIMEOUT_S):
                    jobs = wait_round(cluster, submit_round(cluster, folder, data, f"r{number}"))
                record = {
                    "round": number,
                    "seconds": round(time.monotonic() - started, 1),
                    "load_average_1min": round(os.getloadavg()[0], 1),
                    "jobs": {
                        job.mode: {"state": job.state, "preflight_passed": job.preflight_passed}
                        for job in jobs
                    },
                }
                rounds.append(record)
                print(record, flush=True)
    passed = sum(
        job["state"] == "COMPLETED" and job["preflight_passed"]
        for record in rounds
        for job in record["jobs"].values()
    )
    total = sum(len(record["jobs"]) for record in rounds)
    path = save(
        "jobs_under_load",
        {
            "what": "jobs of every launch mode on the 2-node test Slurm, a CPU hog on every core",
            "cores": os.cpu_count(),
            "passed": passed,
            "jobs": total,
            "rounds": rounds,
        },
    )
    print(f"{passed} of {total} jobs passed their preflight and completed; {path}")


if __name__ == "__main__":
    main()
