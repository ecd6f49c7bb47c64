"""The site pages' jobs (docs/site-lumi.md): each documented command renders the job script
kept beside it in tests/fixtures/jobs/. This test only compares; after a deliberate change,
`.venv/bin/python -m tests.support.golden_jobs` writes them anew (read the diff)."""

from __future__ import annotations

import pytest

from tests.conftest import REPO
from tests.support.golden_jobs import LUMI_GUIDE, site_file, site_script


@pytest.mark.parametrize("name", list(LUMI_GUIDE))
def test_every_kind_of_job_in_lumis_ai_guide_is_a_documented_command(name: str) -> None:
    golden = site_file(name)
    assert site_script(name) == golden.read_text(), (
        f"the {name} job script differs from {golden}; if the change is deliberate, run "
        "`.venv/bin/python -m tests.support.golden_jobs` and read the diff"
    )
    # The page shows the command and links the script.
    page = (REPO / "docs" / "site-lumi.md").read_text()
    assert f"tests/fixtures/jobs/lumi-{name}.sbatch" in page
    assert " ".join(LUMI_GUIDE[name]["args"][:2]) in page
