"""A job script a sysadmin reads in one sitting: the LUMI torchrun job is at most 180 lines, each
block commented, and no template parses JSON with sed (Python writes what bash reads as
key=value lines: hang.env)."""

from __future__ import annotations

import re
from importlib.resources import files

from scaletrain.planning.script_facts import read_script_facts
from tests.conftest import REPO
from tests.support.job_scripts import plan_for, render

MAX_LINES = 180
# `sed ... something.json` (or "$file.json"), wherever it stands on a line.
SED_ON_JSON = re.compile(r"\bsed\b[^\n]*\.json\b")


def lumi_torchrun_job(script: str) -> str:
    """`scaletrain submit -c lumi --gpus 16 -t 2:00:00 --dry-run <script>`, rendered."""
    facts = read_script_facts(REPO / script)
    plan = plan_for(cluster="lumi", gpus=16, time="2:00:00", script=script, script_facts=facts)
    return render(plan, workdir=REPO)


def blocks(script: str) -> list[list[str]]:
    """The script's blocks: runs of lines between blank lines, after the #SBATCH header."""
    body = script.split("\n\n", 1)[1]
    return [block.splitlines() for block in body.split("\n\n") if block.strip()]


def test_the_lumi_torchrun_job_is_at_most_180_lines_with_every_block_commented() -> None:
    for script in ("examples/mnist/train.py", "train.py"):  # with scaletrain, and perhaps not
        job = lumi_torchrun_job(script)
        assert len(job.splitlines()) <= MAX_LINES, (script, len(job.splitlines()))
        uncommented = [block for block in blocks(job) if not any(
            line.lstrip().startswith("#") for line in block)]  # fmt: skip
        assert not uncommented, uncommented


def test_no_template_applies_sed_to_a_json_file() -> None:
    templates = files("scaletrain.launch") / "templates"
    texts = {path.name: path.read_text() for path in templates.iterdir() if path.is_file()}
    assert len(texts) > 10
    assert not [name for name, text in texts.items() if SED_ON_JSON.search(text)]
    # The pattern finds what it must.
    assert SED_ON_JSON.search("""blamed=$(sed -n 's/"exclude"//p' "$run_dir/hang.json")""")
