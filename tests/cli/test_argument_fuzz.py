"""Fuzz: random command lines of hostile words and options. Whatever is typed, scaletrain
answers with a result or one clean error, never a traceback, and changes no file it found.

`run`, `check` and `bench` start processes when their input is good, so they are fuzzed only
where no script exists (tests/cli/test_hostile_inputs.py has their refusals).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from tests.support.cli import assert_clean, invoke, login_node
from tests.support.fuzz import FUZZ, hostile_text

OPTIONS = {
    "plan": ["-c", "-t", "-g", "-N", "--gpus-per-node", "-p", "-m", "--cpus-per-gpu",
             "--memory-per-gpu", "--global-batch-size", "--accumulation-steps", "-A",
             "--job-name", "--container", "--json"],
    "submit": ["-c", "-t", "-g", "-N", "-p", "-m", "-A", "--job-name", "--container", "--name",
               "--runs-dir", "--no-requeue", "--max-requeues", "--stop-margin",
               "--max-restarts", "--no-check", "--dry-run", "--json"],
    "status": ["--runs-dir", "--json"],
    "logs": ["--runs-dir", "-f"],
    "cancel": ["--runs-dir", "--json"],
    "doctor": ["--json"],
    "clusters": ["--json"],
    "clusters show": ["--json"],
    "run": ["-n", "--name", "--runs-dir", "--max-restarts", "--json"],
}  # fmt: skip

# Argument words: option names of any command, and hostile text (no NUL: argv cannot hold it).
word = st.one_of(
    st.sampled_from(sorted({option for options in OPTIONS.values() for option in options})),
    hostile_text.filter(lambda text: "\x00" not in text),
)


@st.composite
def command_lines(draw: st.DrawFn) -> list[str]:
    command = draw(st.sampled_from(sorted(OPTIONS)))
    words = draw(st.lists(word, max_size=10))
    if command in ("plan", "submit"):  # often a request that gets far: cluster, time, GPUs
        words = draw(st.sampled_from([[], ["-c", "lumi", "-t", "1:00:00", "-g", "8"]])) + words
        words.append(draw(st.sampled_from(["train.py", "missing.py", *words[-1:]])))
    return [*command.split(), *words]


@contextlib.contextmanager
def workspace() -> Iterator[Path]:
    """A fresh folder with a training script (not for `run`), a file and a run, as cwd."""
    previous = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="fuzz-") as folder:
        root = Path(folder)
        (root / "afile").write_text("x")
        (root / "runs" / "r").mkdir(parents=True)
        (root / "runs" / "r" / "jobs.jsonl").write_text(
            '{"event": "submitted", "job_id": "7", "time": "2026-01-01T00:00:00+00:00"}\n'
        )
        os.chdir(root)
        try:
            yield root
        finally:
            os.chdir(previous)


def _files(root: Path) -> dict[Path, bytes]:
    return {path: path.read_bytes() for path in root.rglob("*") if path.is_file()}


@FUZZ
@given(arguments=command_lines())
def test_any_command_line_gets_a_result_or_one_clean_error(arguments: list[str]) -> None:
    with workspace() as root:
        if arguments[0] != "run":
            (root / "train.py").write_text("print('hi')\n")
        before = _files(root)
        outcome = invoke(*arguments, env=login_node(root))
        assert_clean(outcome, f"scaletrain {arguments}")
        assert outcome.exit_code in (0, 1, 2), outcome
        after = _files(root)
        assert {path: after.get(path) for path in before} == before
