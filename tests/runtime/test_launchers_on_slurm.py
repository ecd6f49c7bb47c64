"""Launcher corners on the real test Slurm: an interactive `srun --pty` shell in a multi-task
allocation, srun's MPI plugins with cyclic distributions, and mpirun inside a batch job."""

from __future__ import annotations

import contextlib
import json
import os
import pty
import re
import select
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import WORKERS
from tests.support.slurm_cluster import SlurmCluster

pytestmark = pytest.mark.slurm

PROBE = f"{sys.executable} {WORKERS / 'layout_probe.py'}"


def layouts(output: str) -> list[dict[str, Any]]:
    """The LAYOUT lines of the probes, by rank."""
    return sorted(printed(output), key=lambda layout: layout["rank"])


def printed(output: str) -> list[dict[str, Any]]:
    """The LAYOUT lines of the probes, in the order printed (a terminal may prefix codes)."""
    return [json.loads(found) for found in re.findall(r"LAYOUT (\{[^{}]*\})", output)]


class Terminal:
    """A program on a pseudo-terminal of its own, typed into line by line (srun --pty needs
    a terminal). Every read has a deadline; `close` kills what is left."""

    def __init__(self, argv: list[str], environ: dict[str, str], cwd: Path) -> None:
        self.pid, self.fd = pty.fork()
        if self.pid == 0:  # the child: becomes the program, on the terminal
            os.chdir(cwd)
            os.execve(argv[0], argv, environ)
        self.seen = ""

    def read_until(self, text: str, *, count: int = 1, timeout: float = 60.0) -> str:
        deadline = time.monotonic() + timeout
        while self.seen.count(text) < count:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.fd], [], [], left)[0]:
                raise AssertionError(f"no {text!r} within {timeout:.0f} s:\n{self.seen}")
            try:
                self.seen += os.read(self.fd, 4096).decode(errors="replace").replace("\r", "")
            except OSError:  # the program ended
                raise AssertionError(f"ended before {text!r}:\n{self.seen}") from None
        return self.seen

    def type(self, line: str) -> None:
        os.write(self.fd, (line + "\n").encode())

    def close(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)
        os.close(self.fd)


def test_python_typed_into_srun_pty_in_a_four_task_allocation_is_one_process(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """`salloc --ntasks-per-node=4`, `srun --pty bash`, then `python train.py` by hand: one
    process, not rank 0 of 4 waiting forever; `srun python` from that shell is a real step
    (--overlap: the shell's step holds the allocation's cores)."""
    salloc = str(slurm_cluster.bin / "salloc")
    name = f"interactive-{os.getpid()}"
    argv = [salloc, f"--job-name={name}", "--nodes=1", "--ntasks-per-node=4",
            "srun", "--pty", "bash", "--norc"]  # fmt: skip
    terminal = Terminal(argv, slurm_cluster.environ(), tmp_path)
    prompt = "bash-"  # bash's default prompt, bash-5.2#
    try:
        terminal.read_until(prompt)
        terminal.type(PROBE)
        terminal.read_until(prompt, count=2)
        terminal.type(f"srun --overlap --ntasks=2 {PROBE}")
        terminal.read_until(prompt, count=3)
        terminal.type("exit")
        output = terminal.read_until("Relinquishing job allocation")
    finally:
        terminal.close()
        slurm_cluster.run(["scancel", f"--name={name}"])  # if it did not end by itself
    by_hand, *step = printed(output)
    assert (by_hand["launcher"], by_hand["world_size"]) == ("interactive", 1), output
    in_step = sorted((seen["launcher"], seen["rank"], seen["world_size"]) for seen in step)
    assert in_step == [
        ("slurm", 0, 2), ("slurm", 1, 2),
    ], output  # fmt: skip


@pytest.mark.parametrize("plugin", ["pmi2", "pmix"])
def test_srun_mpi_plugins_with_a_cyclic_distribution(
    slurm_cluster: SlurmCluster, tmp_path: Path, plugin: str
) -> None:
    """Three ranks dealt round the two nodes (0->n1, 1->n2, 2->n1): node and local rank come
    from Slurm, not from rank // tasks per node."""
    result = slurm_cluster.run(
        ["srun", f"--mpi={plugin}", "--nodes=2", "--ntasks=3", "--distribution=cyclic",
         *PROBE.split()],
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    found = layouts(result.stdout)
    keys = ("rank", "host", "node_rank", "local_rank", "local_world_size")
    assert [tuple(seen[key] for key in keys) for seen in found] == [
        (0, "n1", 0, 0, 2), (1, "n2", 1, 0, 1), (2, "n1", 0, 1, 2),
    ], result.stdout  # fmt: skip
    assert {
        (seen["launcher"], seen["world_size"], seen["num_nodes"], seen["master_addr"])
        for seen in found
    } == {("mpi", 3, 2, "n1")}


def test_mpirun_inside_a_batch_job_agrees_on_rank_zeros_node(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    """Open MPI starts its daemon on n2 with srun: ranks there see a step without n1."""
    script = tmp_path / "mpirun.sbatch"
    script.write_text(
        "#!/bin/bash\n#SBATCH --nodes=2\n#SBATCH --ntasks-per-node=2\n"
        f"#SBATCH --output={tmp_path}/mpirun.out\n"
        # As root (the test machine); tcp between the nodes' addresses only.
        f"mpirun --allow-run-as-root --mca btl self,tcp -np 4 {PROBE}\n"
    )
    submitted = slurm_cluster.run(["sbatch", "--parsable", str(script)], cwd=tmp_path)
    assert submitted.returncode == 0, submitted.stderr
    state = slurm_cluster.wait_for_job(submitted.stdout.strip())
    output = (tmp_path / "mpirun.out").read_text()
    assert state == "COMPLETED", output
    found = layouts(output)
    keys = ("rank", "host", "node_rank", "local_rank")
    assert [tuple(seen[key] for key in keys) for seen in found] == [
        (0, "n1", 0, 0), (1, "n1", 0, 1), (2, "n2", 1, 0), (3, "n2", 1, 1),
    ], output  # fmt: skip
    assert {(seen["launcher"], seen["master_addr"], seen["num_nodes"]) for seen in found} == {
        ("mpi", "n1", 2)
    }
