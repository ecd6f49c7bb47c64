"""The site pages' jobs (docs/site-lumi.md, docs/site-puhti-mahti.md): each documented command
renders the job script kept beside it in tests/fixtures/jobs/. Regenerate them with
SCALETRAIN_WRITE_FIXTURES=1 after a deliberate change, and read the diff."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from scaletrain import __version__
from scaletrain.core.toml_text import parse_toml
from tests.conftest import REPO, clean_environ, scaletrain

JOBS = REPO / "tests" / "fixtures" / "jobs"
LUMI_GUIDE: dict[str, dict[str, Any]] = parse_toml((JOBS / "lumi-guide.toml").read_text())
# Where the documented jobs are submitted from.
PROJECT = "/scratch/project_465000000/me"


def dry_run(args: list[str], tmp_path: Path) -> str:
    """`scaletrain submit --dry-run ARGS` from a folder with train.py, as if from PROJECT."""
    (tmp_path / "train.py").write_text("import torch\n")
    environ = clean_environ(XDG_CONFIG_HOME=str(tmp_path / "config"))
    environ.pop("VIRTUAL_ENV", None)
    result = scaletrain("submit", "--dry-run", *args, cwd=tmp_path, environ=environ)
    assert result.returncode == 0, result.stderr
    text = result.stdout.replace(str(tmp_path), PROJECT)
    return text.replace(f"scaletrain {__version__} ", "scaletrain <version> ")


@pytest.mark.parametrize("name", list(LUMI_GUIDE))
def test_every_kind_of_job_in_lumis_ai_guide_is_a_documented_command(
    name: str, tmp_path: Path
) -> None:
    script = dry_run(LUMI_GUIDE[name]["args"], tmp_path)
    golden = JOBS / f"lumi-{name}.sbatch"
    if os.environ.get("SCALETRAIN_WRITE_FIXTURES"):
        golden.write_text(script)
    assert script == golden.read_text()
    # The page shows the command and links the script.
    page = (REPO / "docs" / "site-lumi.md").read_text()
    assert f"tests/fixtures/jobs/lumi-{name}.sbatch" in page
    assert " ".join(LUMI_GUIDE[name]["args"][:2]) in page
