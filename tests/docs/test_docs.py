"""README.md and docs/ say what the code does: every sample is run or checked.

How a block is checked, and how to mark one that cannot run here, is in
tests/support/doc_samples.py. Commands run in a fresh folder made of links to this checkout
(its .venv, src, examples, tests, scripts, ...), with no cluster profiles of the user, a
stand-in `sbatch`/`srun`/`scontrol` on PATH (tests/support/fake_slurm.py: `sbatch` prints
job id 1234567) and an 80-column terminal.
"""

from __future__ import annotations

import difflib
import importlib.util
import json
import re
import subprocess
from pathlib import Path

import pytest

from scaletrain.clusters.catalog import profile_from_text
from scaletrain.core.toml_text import parse_toml
from tests.conftest import REPO, clean_environ
from tests.support import fake_slurm
from tests.support.doc_samples import OMITTED, Block, blocks, output_matches

DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
BLOCKS = [block for document in DOCUMENTS for block in blocks(document)]
SESSIONS = [block for block in BLOCKS if block.is_session and block.not_run is None]
# What the sandbox links to: enough of the checkout for every documented command.
# Not pyproject.toml or requirements/: without them scripts/setup-venv.sh never reinstalls.
CHECKOUT = ("src", "examples", "tests", "scripts", "benchmarks")
# A documented command (the demo trains MNIST) ends within this many seconds.
COMMAND_TIMEOUT_S = 600
# Markdown links: [text](target); the target up to a space or ")".
LINK = re.compile(r"\]\((?P<target>[^)\s]+)")


def test_every_block_is_run_checked_or_says_why_not() -> None:
    unchecked = [
        block.where
        for block in BLOCKS
        if block.not_run is None
        and not block.is_session
        and block.info not in ("python", "toml", "json")
    ]
    assert not unchecked, (
        f"{unchecked}: show the command that prints each block as `$ command` lines, or mark "
        "it with <!-- not run: why --> on the line above (see tests/support/doc_samples.py)"
    )
    assert len(SESSIONS) >= 10, "the docs test finds too few sessions: is the parser broken?"


def sandbox(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A folder that looks like this checkout, and the environment of a fresh user."""
    work = tmp_path / "work"
    work.mkdir()
    for name in (*CHECKOUT, ".venv"):
        (work / name).symlink_to(REPO / name)
    (work / "train.py").write_text((REPO / "tests/workers/hello.py").read_text())
    environ = clean_environ(
        HOME=str(tmp_path / "home"),
        XDG_CONFIG_HOME=str(tmp_path / "config"),
        COLUMNS="80",
        NO_COLOR="1",
        TERM="dumb",
        PYTHONUNBUFFERED="1",
        # Python run through the sandbox's .venv link must not cache its paths in the venv.
        PYTHONDONTWRITEBYTECODE="1",
        **fake_slurm.install(tmp_path / "bin", tmp_path / "fake-slurm.jsonl"),
    )
    return work, environ


@pytest.mark.parametrize("block", SESSIONS, ids=lambda block: block.where)
def test_session_prints_what_the_docs_show(block: Block, tmp_path: Path) -> None:
    work, environ = sandbox(tmp_path)
    for command in block.commands:
        result = subprocess.run(
            ["bash", "-c", command.text],
            cwd=work,
            env=environ,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            timeout=COMMAND_TIMEOUT_S,
            check=False,
        )
        where = f"{block.path.name}:{command.line}: $ {command.text}"
        if all(line == OMITTED for line in command.output):  # output not shown: must succeed
            assert result.returncode == 0, f"{where}\nexit {result.returncode}\n{result.stdout}"
            continue
        actual = result.stdout.replace(str(work), "/work")
        diff = "\n".join(difflib.unified_diff(command.output, actual.splitlines(), lineterm=""))
        assert output_matches(command.output, actual), f"{where}\n{diff}"


@pytest.mark.parametrize(
    "block", [block for block in BLOCKS if block.info == "python"], ids=lambda b: b.where
)
def test_python_samples_compile(block: Block) -> None:
    compile("\n".join(block.lines), block.where, "exec")


@pytest.mark.parametrize(
    "block", [block for block in BLOCKS if block.info == "toml"], ids=lambda b: b.where
)
def test_toml_samples_parse_and_profiles_validate(block: Block) -> None:
    text = "\n".join(block.lines)
    data = parse_toml(text)
    if "node" in data:  # a cluster profile: the schema must accept it as written
        profile_from_text("mysite", text, where=block.where)


@pytest.mark.parametrize(
    "block", [block for block in BLOCKS if block.info == "json"], ids=lambda b: b.where
)
def test_json_samples_parse(block: Block) -> None:
    for line in block.lines:
        json.loads(line)


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda path: path.name)
def test_no_link_leaves_the_repository(document: Path) -> None:
    text = document.read_text(encoding="utf-8")
    outside = []
    for match in LINK.finditer(text):
        target = match["target"].split("#")[0]
        if not target or re.match(r"https?://", target):
            continue
        resolved = (document.parent / target).resolve()
        if not resolved.is_relative_to(REPO) or not resolved.exists():
            outside.append(match["target"])
    # Paths in backticks count too: a reader follows them like links.
    outside += re.findall(r"`(\.\./[^`]*)`", text)
    assert not outside, f"{document.name} points outside the repository: {outside}"


def test_benchmark_figures_are_the_committed_results() -> None:
    """summary.md, where README and docs/ send readers for figures, is what the benchmark
    command writes from the committed result files (`python benchmarks/run_all.py --summary`)."""
    spec = importlib.util.spec_from_file_location("run_all", REPO / "benchmarks" / "run_all.py")
    assert spec is not None and spec.loader is not None
    run_all = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(run_all)
    assert run_all.SUMMARY.read_text() == run_all.render_summary(), (
        "benchmarks/results/summary.md differs from the result files beside it: run "
        "`python benchmarks/run_all.py --summary`, or the benchmarks again"
    )
