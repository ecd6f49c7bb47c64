"""One process's save as a user finds it on disk: a published step folder whose
checkpoint.json describes its files, the newest named in LATEST, older ones pruned, one line
on stderr; and the background writer behind training."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import torch
import torch.distributed.checkpoint as dcp

from scaletrain import __version__
from scaletrain.checkpoint.layout import CheckpointStore
from scaletrain.checkpoint.manifest import Manifest, digest
from scaletrain.checkpoint.storage import open_storage
from scaletrain.checkpoint.writer import (
    RANK_STATE_KEY,
    WRITER_NICENESS,
    BackgroundWriter,
    dcp_state,
    publish,
)
from tests.checkpoint.conftest import job_of, save_alone, target_alone

SAVED_LINE = re.compile(
    r"^scaletrain: saved checkpoint (?P<folder>\S+) "
    r"\(test; (?P<mb>[\d,.]+) MB in (?P<seconds>[\d.]+) s\)$",
    re.MULTILINE,
)


def test_a_save_is_published_with_a_manifest_of_its_files(
    tmp_path: Path, storage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    state = {"weight": torch.arange(1000, dtype=torch.float32), "bias": torch.ones(3)}
    before = datetime.now(timezone.utc).replace(microsecond=0)
    started = time.perf_counter()
    published = save_alone(tmp_path, state, storage=storage, step=5)
    took = time.perf_counter() - started
    assert published == tmp_path / "step-0000005"
    assert (tmp_path / "LATEST").read_text() == "step-0000005\n"
    assert not (tmp_path / "step-0000005.partial").exists()
    manifest = Manifest.read(published)
    assert manifest.position.step == 5 and manifest.world_size == 1 and manifest.reason == "test"
    assert manifest.versions == {"scaletrain": __version__, "torch": torch.__version__}
    saved_at = datetime.fromisoformat(manifest.saved_at)
    assert saved_at.tzinfo == timezone.utc and saved_at.microsecond == 0
    assert before <= saved_at <= datetime.now(timezone.utc) + timedelta(seconds=1)
    on_disk = sorted(path.name for path in published.iterdir() if path.name != "checkpoint.json")
    assert list(manifest.files) == on_disk  # every file, in order, and nothing else
    assert all(manifest.files[name] == digest(published / name) for name in on_disk)
    (line,) = SAVED_LINE.finditer(capsys.readouterr().err)
    assert line["folder"] == str(published)
    total = sum(file.size for file in manifest.files.values())
    assert line["mb"] == f"{total / 1e6:,.1f}"
    assert 0 <= float(line["seconds"]) <= round(took, 2) + 0.01  # the save's own time


def test_the_state_and_this_ranks_generators_load_with_plain_dcp(
    tmp_path: Path, storage: str
) -> None:
    torch.manual_seed(7)
    state = {"weight": torch.randn(16, 16)}
    published = save_alone(tmp_path, state, storage=storage)
    loaded = {"model": {"weight": torch.zeros(16, 16)}, RANK_STATE_KEY: {"0": ""}}
    dcp.load(loaded, checkpoint_id=published, no_dist=True)
    assert torch.equal(loaded["model"]["weight"], state["weight"])
    saved_generators = json.loads(loaded[RANK_STATE_KEY]["0"])
    expected = job_of(state).rank_state
    assert saved_generators.keys() == expected.keys()


def test_the_generators_are_filed_under_the_ranks_number(tmp_path: Path) -> None:
    target = target_alone(tmp_path)
    job = job_of({"weight": torch.ones(2)})
    state = dcp_state(job, target)
    assert state["model"] is job.state["model"]
    assert json.loads(state[RANK_STATE_KEY]["0"]) == json.loads(json.dumps(job.rank_state))


def test_only_the_newest_checkpoints_are_kept(tmp_path: Path, storage: str) -> None:
    for step in (1, 2, 3):
        save_alone(tmp_path, {"weight": torch.full((4,), float(step))}, storage=storage, step=step)
    names = sorted(path.name for path in tmp_path.iterdir())
    assert names == ["LATEST", "step-0000002", "step-0000003"]  # keep=2 in target_alone


def test_only_rank_zero_publishes(tmp_path: Path) -> None:
    target = target_alone(tmp_path)
    other = dataclasses.replace(target, rank=1)
    folder = target.store.partial(5)
    folder.mkdir(parents=True)
    assert publish(job_of({"weight": torch.ones(2)}), other, {}, 0.0) is None
    assert list(folder.iterdir()) == [] and not (tmp_path / "LATEST").exists()


def test_the_background_writer_publishes_at_a_lower_priority(tmp_path: Path, storage: str) -> None:
    target = target_alone(tmp_path)
    writer = BackgroundWriter(target, open_storage(storage, target, pin=False, asynchronous=True))
    try:
        state = {"weight": torch.arange(64, dtype=torch.float32)}
        writer.submit(job_of(state, step=3))
        writer.wait()
        assert not writer.in_flight
        assert CheckpointStore(tmp_path).latest() == tmp_path / "step-0000003"
        writer.write_now(job_of({"weight": torch.zeros(64)}, step=4))
        assert CheckpointStore(tmp_path).latest() == tmp_path / "step-0000004"
        in_writer = writer._executor.submit(
            lambda: os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
        ).result()
        assert in_writer == WRITER_NICENESS
    finally:
        writer.wait()
        writer._executor.shutdown()
