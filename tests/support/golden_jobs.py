"""The example job scripts kept in tests/fixtures/jobs/: the golden jobs quoted in
docs/slurm-jobs.md, and the site jobs of docs/site-lumi.md (every kind of job in LUMI's AI
guide, as `scaletrain submit --dry-run` prints it for the options in lumi-guide.toml).

The test suite only compares (tests/launch/test_render.py, tests/launch/test_site_jobs.py); it
never writes them. After a deliberate change to the job scripts, write them anew with this
command and read the diff:

    .venv/bin/python -m tests.support.golden_jobs
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from scaletrain import __version__
from scaletrain.core.toml_text import parse_toml
from tests.conftest import clean_environ, scaletrain
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


# name -> what the job is and the `scaletrain submit` options of docs/site-lumi.md.
LUMI_GUIDE: dict[str, dict[str, Any]] = parse_toml((FOLDER / "lumi-guide.toml").read_text())
# Where the documented site jobs are submitted from.
PROJECT = "/scratch/project_465000000/me"


def site_file(name: str) -> Path:
    return FOLDER / f"lumi-{name}.sbatch"


def site_script(name: str) -> str:
    """`scaletrain submit --dry-run` with the options of site job `name`, from a folder with
    train.py, as if from PROJECT and outside any venv."""
    with tempfile.TemporaryDirectory() as folder:
        (Path(folder) / "train.py").write_text("import torch\n")
        environ = clean_environ(XDG_CONFIG_HOME=str(Path(folder) / "config"))
        environ.pop("VIRTUAL_ENV", None)
        arguments = LUMI_GUIDE[name]["args"]
        result = scaletrain("submit", "--dry-run", *arguments, cwd=Path(folder), environ=environ)
        if result.returncode != 0:
            raise RuntimeError(f"scaletrain submit --dry-run {arguments} failed: {result.stderr}")
        text = result.stdout.replace(folder, PROJECT)
    return text.replace(f"scaletrain {__version__} ", "scaletrain <version> ")


def main() -> None:
    written = [(golden_file(name), expected_script(name)) for name in GOLDEN_JOBS]
    written += [(site_file(name), site_script(name)) for name in LUMI_GUIDE]
    for path, new in written:
        old = path.read_text() if path.is_file() else ""
        path.write_text(new)
        print(f"{path}: {'unchanged' if new == old else 'written'}")


if __name__ == "__main__":
    main()
