"""Fuzz: a run folder whose files hold anything: jobs.jsonl, plan.toml, run.json, summary.json,
checkpoint manifests and LATEST, as damaged text, other JSON, or bytes. Every command that
reads them gives a result or one clean error, and no file of the run is lost or changed."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import tomli_w
from hypothesis import given
from hypothesis import strategies as st

from scaletrain.checkpoint.layout import CheckpointStore
from scaletrain.checkpoint.manifest import DamagedCheckpointError, Manifest
from tests.support.cli import assert_clean, invoke, login_node
from tests.support.fuzz import FUZZ, hostile_text
from tests.support.job_scripts import plan_for

JOB = {"event": "submitted", "job_id": "4242", "time": "2026-01-01T00:00:00+00:00"}
RUN = {
    "command": ["python", "-m", "scaletrain.launch.torchrun.entry", "--", "train.py"],
    "host": "elsewhere",
    "pid": 1,
    "started": "2026-01-01T00:00:00+00:00",
    "finished": "2026-01-01T00:01:00+00:00",
    "exit_code": 0,
}
MANIFEST = {
    "format": 1,
    "position": {"step": 8, "epoch": 0, "batches_in_epoch": 8},
    "world_size": 2,
    "reason": "end",
    "saved_at": "2026-01-01T00:01:00+00:00",
    "files": {"__0_0.distcp": {"size": 3, "crc32": 0}},
}

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | hostile_text,
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(hostile_text, children, max_size=3)
    ),
    max_leaves=8,
)


@st.composite
def changed_records(draw: st.DrawFn, valid: dict[str, Any]) -> dict[str, Any]:
    """A valid record with some fields replaced by anything, or removed."""
    record = json.loads(json.dumps(valid))
    for key in draw(st.lists(st.sampled_from(sorted(valid)), max_size=3)):
        if draw(st.booleans()):
            record[key] = draw(json_values)
        else:
            record.pop(key, None)
    return record


def _text(value: Any) -> bytes:
    return json.dumps(value).encode()


def _damaged(valid: bytes) -> st.SearchStrategy[bytes]:
    """The valid bytes cut short, with a byte flipped, or replaced by anything."""
    return st.one_of(
        st.integers(0, len(valid)).map(lambda cut: valid[:cut]),
        st.integers(0, len(valid) - 1).map(
            lambda at: valid[:at] + bytes([valid[at] ^ 0x80]) + valid[at + 1 :]
        ),
        st.binary(max_size=200),
    )


jobs_logs = st.lists(
    st.one_of(
        st.just(_text(JOB)),
        changed_records(JOB).map(_text),
        json_values.map(_text),
        _damaged(_text(JOB)),
    ),
    min_size=1,
    max_size=4,
).map(lambda lines: b"\n".join(lines) + b"\n")

PLAN = tomli_w.dumps(plan_for(cluster="lumi", gpus=8, time="1:00:00").to_dict()).encode()


@st.composite
def plan_files(draw: st.DrawFn) -> bytes:
    plan = plan_for(cluster="lumi", gpus=8, time="1:00:00").to_dict()
    for key in draw(st.lists(st.sampled_from(sorted(plan)), max_size=2)):
        value = draw(json_values)
        if value is None:
            plan.pop(key)
        else:
            plan[key] = value
    try:
        return tomli_w.dumps(plan).encode()
    except (TypeError, ValueError):  # a value TOML cannot hold: the valid plan, damaged
        return draw(_damaged(PLAN))


run_folders = st.fixed_dictionaries(
    {},
    optional={
        "jobs.jsonl": jobs_logs,
        "plan.toml": st.one_of(plan_files(), _damaged(PLAN)),
        "run.json": st.one_of(changed_records(RUN).map(_text), _damaged(_text(RUN))),
        "metrics/summary.json": st.one_of(json_values.map(_text), st.binary(max_size=50)),
        "metrics/train.jsonl": st.binary(max_size=200),
        "stopped.json": st.one_of(json_values.map(_text), st.binary(max_size=50)),
        "logs/r-4242.out": st.binary(max_size=200),
        "checkpoints/LATEST": st.one_of(st.just(b"step-0000008\n"), st.binary(max_size=30)),
        "checkpoints/step-0000008/checkpoint.json": st.one_of(
            changed_records(MANIFEST).map(_text), _damaged(_text(MANIFEST))
        ),
    },
)


@contextlib.contextmanager
def run_folder(files: dict[str, bytes]) -> Iterator[Path]:
    previous = Path.cwd()
    with tempfile.TemporaryDirectory(prefix="fuzz-run-") as folder:
        root = Path(folder)
        (root / "train.py").write_text("print('hi')\n")
        run = root / "runs" / "r"
        run.mkdir(parents=True)
        for name, content in files.items():
            (run / name).parent.mkdir(parents=True, exist_ok=True)
            (run / name).write_bytes(content)
        os.chdir(root)
        try:
            yield run
        finally:
            os.chdir(previous)


COMMANDS = (
    ["status"],
    ["status", "--json", "r"],
    ["logs", "r"],
    ["cancel", "r"],
    ["doctor", "runs/r"],
    ["submit", "-c", "lumi", "-g", "8", "-t", "1:00:00", "--name", "r", "train.py"],
)


@FUZZ
@given(files=run_folders)
def test_any_run_folder_is_read_or_refused_cleanly_and_kept(files: dict[str, bytes]) -> None:
    with run_folder(files) as run:
        env = login_node(run.parents[1])
        for arguments in COMMANDS:
            outcome = invoke(*arguments, env=env)
            assert_clean(outcome, f"scaletrain {arguments} with {files!r}")
            assert outcome.exit_code in (0, 1, 2)
        kept = {str(path.relative_to(run)): path.read_bytes() for path in run.rglob("*")
                if path.is_file()}  # fmt: skip
        assert kept == files


@FUZZ
@given(manifest=st.one_of(changed_records(MANIFEST).map(_text), _damaged(_text(MANIFEST))),
       latest=st.binary(max_size=30))  # fmt: skip
def test_a_damaged_manifest_is_damage_and_nothing_else(manifest: bytes, latest: bytes) -> None:
    with tempfile.TemporaryDirectory(prefix="fuzz-manifest-") as folder:
        store = CheckpointStore(Path(folder))
        checkpoint = store.root / "step-0000008"
        checkpoint.mkdir()
        (checkpoint / "checkpoint.json").write_bytes(manifest)
        (store.root / "LATEST").write_bytes(latest)
        try:
            read = Manifest.read(checkpoint)
        except DamagedCheckpointError as error:
            assert str(checkpoint) in error.problem and "\n" not in error.problem
        else:
            assert read.world_size >= 1 and read.position.step >= 0
        assert store.latest() in (None, checkpoint)
