"""Shared helpers: start real processes with torch.distributed.run (gloo on CPU), and the
real local Slurm cluster for tests marked `slurm`."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from tests.support.leftovers import Isolation, isolate, leftovers

if TYPE_CHECKING:
    import scaletrain as st
    from tests.support.slurm_cluster import SlurmCluster

REPO = Path(__file__).resolve().parents[1]
WORKERS = REPO / "tests" / "workers"
# Hand-written sbatch scripts for the local Slurm cluster (see its README.md).
SLURM_SCRIPTS = REPO / "tests" / "fixtures" / "slurm"

# Every process a test starts must end by itself; this bounds a hung rendezvous.
PROCESS_TIMEOUT_S = 180

_isolation: Isolation | None = None


def pytest_configure(config: pytest.Config) -> None:
    """Count what the session's processes leave behind (tests/support/leftovers.py)."""
    global _isolation
    _isolation = isolate()


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """The session fails if any process, semaphore or temporary folder is left behind."""
    if _isolation is None:
        return
    found = leftovers(_isolation)
    if found:
        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        lines = ["the test session left these behind (now ended or removed):", *found]
        if reporter is not None:
            reporter.write_sep("=", "leftovers", red=True)
            for line in lines:
                reporter.write_line(line)
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def clean_environ(**extra: str) -> dict[str, str]:
    """The test runner's environment without launcher variables that would confuse detection."""
    launcher_prefixes = ("SLURM_", "OMPI_", "PMI_", "PMIX_", "TORCHELASTIC_", "SCALETRAIN_")
    launcher_names = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}
    environ = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith(launcher_prefixes) and name not in launcher_names
    }
    return {**environ, "OMP_NUM_THREADS": "1", **extra}


def free_port() -> int:
    """A port the kernel calls free now, for a launcher that would otherwise take a fixed
    one (DeepSpeed's 29500) that other runs on this machine may hold."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def torchrun(
    script: Path, *args: str, nproc: int = 2, environ: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run `script` as `nproc` local processes with torchrun; output captured as text."""
    # Without --log-dir torchrun leaves an empty torchelastic_* folder in $TMPDIR per run.
    with tempfile.TemporaryDirectory(prefix="torchrun-logs-") as log_dir:
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={nproc}",
            f"--log-dir={log_dir}",
            str(script),
            *args,
        ]
        return subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=PROCESS_TIMEOUT_S,
            env=environ or clean_environ(),
            check=False,
        )


def scaletrain(
    *args: str, cwd: Path, environ: dict[str, str] | None = None, venv: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run the installed `scaletrain` command as a user would (of `venv`, default this one)."""
    folder = venv / "bin" if venv else Path(sys.executable).parent
    command = [str(folder / "scaletrain"), *args]
    return subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT_S,
        cwd=cwd,
        env=environ or clean_environ(),
        check=False,
    )


@pytest.fixture
def single_process() -> Iterator[st.DistEnv]:
    """This test process as a group of one (`st.init()` without a launcher), left after."""
    import scaletrain as st

    yield st.init()
    st.shutdown()


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """A 2-node Slurm cluster (n1, n2; partition debug, 4 CPUs each) for the whole session.

    Started on first use only (tests marked `slurm`); stopped and removed afterwards.
    """
    from tests.support.slurm_cluster import running_cluster

    with running_cluster(tmp_path_factory.mktemp("slurm-cluster")) as cluster:
        yield cluster


@pytest.fixture(scope="session")
def accounting_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SlurmCluster]:
    """The same 2-node cluster with Slurm's accounting (slurmdbd, MariaDB): sacct knows every
    job and each of its runs. Its own cluster, ~4 s more to start: only tests that read
    sacct use it."""
    from tests.support.slurm_cluster import running_cluster

    folder = tmp_path_factory.mktemp("accounting-cluster")
    with running_cluster(folder, accounting=True) as cluster:
        yield cluster


def start_scaletrain(
    *args: str, cwd: Path, log: Path, environ: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start `scaletrain` in the background in a session of its own, output into `log`.

    End it with `end_session` (also when the test fails), which reaches every process it
    started: torchrun and the training processes.
    """
    command = [str(Path(sys.executable).with_name("scaletrain")), *args]
    with log.open("wb") as output:
        return subprocess.Popen(
            command,
            cwd=cwd,
            env=environ or clean_environ(),
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def end_session(process: subprocess.Popen[bytes], *, timeout: float = PROCESS_TIMEOUT_S) -> int:
    """Wait for a process started by `start_scaletrain`; kill its session if it overruns."""
    try:
        return process.wait(timeout=timeout)
    finally:
        kill_session(process)


def kill_session(process: subprocess.Popen[Any]) -> None:
    """SIGKILL whatever is left of the session a test's process was started in (with
    `start_new_session=True`, as `start_scaletrain` does; nothing else)."""
    with contextlib.suppress(ProcessLookupError):  # every process of the session ended
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()
