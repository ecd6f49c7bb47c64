"""The example job scripts kept in tests/fixtures/jobs/ (quoted in docs/slurm-jobs.md).

The test suite only compares (tests/launch/test_render.py); it never writes them. After a
deliberate change to the job scripts, write them anew with this command and read the diff:

    .venv/bin/python -m tests.support.golden_jobs
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from scaletrain import __version__
from tests.support.job_scripts import plan_for, render

FOLDER = Path(__file__).resolve().parents[1] / "fixtures" / "jobs"
# name -> the request; each runs train.py --epochs 10 for 2 hours, as in the docs.
GOLDEN_JOBS: dict[str, dict[str, Any]] = {
    "lumi-torchrun-2-nodes": {"cluster": "lumi", "gpus": 16},
    "puhti-srun-2-nodes": {"cluster": "puhti", "gpus": 8, "mode": "srun"},
}


def expected_script(name: str) -> str:
    """The job script of golden job `name` as rendered now, version-independent."""
    plan = plan_for(script_args=("--epochs", "10"), **GOLDEN_JOBS[name])
    return render(plan).replace(f"scaletrain {__version__} ", "scaletrain <version> ")


def golden_file(name: str) -> Path:
    return FOLDER / f"{name}.sbatch"


def main() -> None:
    for name in GOLDEN_JOBS:
        path = golden_file(name)
        old = path.read_text() if path.is_file() else ""
        new = expected_script(name)
        path.write_text(new)
        print(f"{path}: {'unchanged' if new == old else 'written'}")


if __name__ == "__main__":
    main()
