"""The rendezvous store the batch shell holds for multi-node torchrun and accelerate launches
(templates/rendezvous_store.py, run as `python3 - HOST PORT` with the job's own Python, as the
job runs it): the launchers join it as clients, it outlives them, and it ends on SIGTERM. The
2-node jobs on the test Slurm (tests/launch/test_sites_on_slurm.py) run it in real jobs."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from scaletrain.launch.job_programs import RENDEZVOUS_STORE, program_text
from tests.conftest import clean_environ, free_port

pytestmark = pytest.mark.multiprocess

SCRIPT = """
import torch.distributed as dist
dist.init_process_group("gloo")
print(f"rank {dist.get_rank()} of {dist.get_world_size()}", flush=True)
dist.barrier()
dist.destroy_process_group()
"""


def start_store(port: int, folder: Path) -> subprocess.Popen[str]:
    """The store as the job starts it: its program on the standard input (a here-document)."""
    program = folder / "store-program.py"
    program.write_text(program_text(RENDEZVOUS_STORE))
    with program.open() as stdin:
        return subprocess.Popen(
            [sys.executable, "-", "localhost", str(port)],
            stdin=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=clean_environ(),
        )


def agent(script: Path, port: int, run_id: str, node: int) -> subprocess.Popen[str]:
    """One node's torchrun, as the generated job starts it on several nodes."""
    # --log-dir: else torchrun leaves an empty torchelastic_* folder in $TMPDIR.
    log_dir = script.parent / f"logs-{run_id}-{node}"
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "torch.distributed.run", "--nnodes=2", "--nproc_per_node=1"),
            *("--rdzv_backend=c10d", f"--rdzv_endpoint=localhost:{port}", f"--rdzv_id={run_id}"),
            *("--rdzv_conf=is_host=false", "--max_restarts=0", f"--log-dir={log_dir}"),
            *("--", str(script)),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=clean_environ(),
    )


def test_two_launches_join_the_store_as_clients_and_it_ends_on_sigterm(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(SCRIPT)
    port = free_port()
    store = start_store(port, tmp_path)
    try:
        # Two launches in turn, as the preflight and the training: a new store for each.
        for launch in ("preflight", "training"):
            if launch == "training":
                store = start_store(port, tmp_path)
            agents = [agent(script, port, launch, node) for node in range(2)]
            outputs = [a.communicate(timeout=120)[0] for a in agents]
            assert [a.returncode for a in agents] == [0, 0], outputs
            ranks = [line for o in outputs for line in o.splitlines() if line.startswith("rank ")]
            assert sorted(ranks) == ["rank 0 of 2", "rank 1 of 2"], outputs
            for output in outputs:
                assert "exit barrier" not in output and "Traceback" not in output, output
            # Every launcher has ended; the store has not: it is the batch shell's.
            assert store.poll() is None
            with socket.create_connection(("localhost", port), timeout=5):
                pass
            store.send_signal(signal.SIGTERM)
            assert store.wait(timeout=10) == 0, store.communicate()[0]
    finally:
        if store.poll() is None:
            store.kill()
            store.wait(timeout=10)


def test_a_port_in_use_is_an_error_that_says_so(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        store = start_store(taken.getsockname()[1], tmp_path)
        output = store.communicate(timeout=60)[0]
    assert store.returncode == 1
    assert "scaletrain: cannot hold the rendezvous store on localhost:" in output
    assert "Address already in use" in output and "HINT:" in output
