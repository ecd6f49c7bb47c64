"""Helpers for the checkpoint tests: the resumable worker on each storage, its weights,
uninterrupted references, saves in one process."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from scaletrain.checkpoint.layout import CheckpointStore
from scaletrain.checkpoint.manifest import Position
from scaletrain.checkpoint.state import capture_rank_state
from scaletrain.checkpoint.storage import STORAGES, StorageName, open_storage
from scaletrain.checkpoint.writer import SaveJob, SaveTarget, write_checkpoint
from tests.conftest import WORKERS, end_session, kill_session, scaletrain, start_scaletrain
from tests.support.waiting import wait_until

# The resumable worker (resumable.py) with a choice of storage: `--storage NAME`.
RESUMABLE = WORKERS / "resumable_on_storage.py"
# Polling interval (s) while a test waits for a run to reach a point.
POLL_S = 0.02


@pytest.fixture(params=STORAGES)
def storage(request: pytest.FixtureRequest) -> StorageName:
    """Each storage a Checkpointer can use: the tests that take it run on both."""
    name: StorageName = request.param
    return name


def run_args(name: str, *worker_args: str, nproc: int = 2, restarts: int = 0) -> list[str]:
    """`scaletrain run` of the resumable worker; its files go to runs/<name>/out. Its
    `--storage` (default "dcp") is one of `worker_args`."""
    return [
        "run",
        "--nproc",
        str(nproc),
        "--name",
        name,
        "--max-restarts",
        str(restarts),
        str(RESUMABLE),
        "--out",
        f"runs/{name}/out",
        *worker_args,
    ]


def weights(run: Path, file: str = "weights.pt") -> dict[str, torch.Tensor]:
    loaded: dict[str, torch.Tensor] = torch.load(run / "out" / file, weights_only=True)
    return loaded


def assert_same_weights(actual: dict[str, torch.Tensor], expected: dict[str, torch.Tensor]) -> None:
    """Bit for bit: a resumed deterministic CPU run must not differ in a single bit."""
    assert actual.keys() == expected.keys()
    different = [name for name in expected if not torch.equal(actual[name], expected[name])]
    assert not different, f"weights differ from the uninterrupted run: {different}"


def pids(run: Path, nproc: int = 2) -> list[int] | None:
    """The PIDs of the training processes once all have resumed (None before)."""
    files = [run / "out" / "pids" / f"rank-{rank}.pid" for rank in range(nproc)]
    if not all(file.is_file() and file.read_text() for file in files):
        return None
    return [int(file.read_text()) for file in files]


def _training_process_of(pid: int, run: Path) -> bool:
    """Whether `pid` is still a resumable worker started for `run` (not a reused PID)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes()
        folder = Path(f"/proc/{pid}/cwd").readlink()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return str(RESUMABLE).encode() in command and folder == run.parents[1]


def kill_job(process: subprocess.Popen[bytes], run: Path, nproc: int = 2) -> None:
    """SIGKILL a whole run, like a failed node: its training processes (torchrun starts
    them in sessions of their own), then torchrun and the CLI."""
    files = [run / "out" / "pids" / f"rank-{rank}.pid" for rank in range(nproc)]
    for file in files:
        if file.is_file() and file.read_text() and _training_process_of(int(file.read_text()), run):
            os.kill(int(file.read_text()), signal.SIGKILL)
    kill_session(process)


def request_stop(run: Path) -> None:
    """What a job script's USR1 trap does."""
    (run / "stop-requested").write_text("USR1 from the job script\n")


def interrupted_run(
    tmp_path: Path,
    name: str,
    *worker_args: str,
    when: Callable[[Path], bool],
    interrupt: Callable[[Path, subprocess.Popen[bytes]], object],
    nproc: int = 2,
    restarts: int = 0,
) -> tuple[int, str]:
    """Run the worker paced at 50 ms per step; once `when(run folder)` holds, call
    `interrupt(run folder, the scaletrain process)`; return exit code and console output."""
    run = tmp_path / "runs" / name
    log = tmp_path / f"{name}.log"
    command = run_args(name, *worker_args, "--step-seconds", "0.05", nproc=nproc, restarts=restarts)
    process = start_scaletrain(*command, cwd=tmp_path, log=log)
    try:
        wait_until(
            lambda: when(run), f"{name} to reach the moment of the interruption", pause_s=POLL_S
        )
        interrupt(run, process)
        exit_code = end_session(process)
    finally:
        kill_job(process, run, nproc)
    return exit_code, log.read_text()


def json_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


@pytest.fixture(scope="session")
def reference(
    tmp_path_factory: pytest.TempPathFactory,
) -> Callable[..., dict[str, torch.Tensor]]:
    """Final weights of an uninterrupted run without checkpoints, for given worker options."""
    cache: dict[tuple[str, ...], dict[str, torch.Tensor]] = {}

    def uninterrupted(*worker_args: str) -> dict[str, torch.Tensor]:
        if worker_args not in cache:
            folder = tmp_path_factory.mktemp("reference")
            result = scaletrain(
                *run_args("reference", *worker_args, "--no-checkpoints"), cwd=folder
            )
            assert result.returncode == 0, result.stderr[-3000:]
            assert not (folder / "runs/reference/checkpoints").exists()
            cache[worker_args] = weights(folder / "runs/reference")
        return cache[worker_args]

    return uninterrupted


def target_alone(root: Path, cores: int = 2) -> SaveTarget:
    """Where one process saves without a process group: what every rank does for its share."""
    return SaveTarget(
        store=CheckpointStore(root),
        rank=0,
        world_size=1,
        group=None,
        keep=2,
        device=torch.device("cpu"),
        cores=cores,
    )


def job_of(model_state: dict[str, torch.Tensor], step: int = 5) -> SaveJob:
    return SaveJob(
        position=Position(step=step),
        reason="test",
        state={"model": model_state},
        rank_state=capture_rank_state(torch.device("cpu"), None),
    )


def save_alone(root: Path, state: dict[str, torch.Tensor], *, storage: str, step: int = 5) -> Path:
    """Save `state` synchronously in one process on `storage`."""
    target = target_alone(root)
    chosen = open_storage(storage, target, pin=False, asynchronous=False)
    published = write_checkpoint(job_of(state, step), target, chosen)
    assert published is not None
    return published
