"""Network checks in a network namespace of our own: an unreachable rendezvous address must
fail in seconds (not hang), and socket interface variables must name real interfaces.

The namespace has a veth pair whose end is named like LUMI's Slingshot interfaces (hsn0,
10.222.0.1/24). 10.222.0.2 is an address on that link whose frames go to a MAC nobody owns,
so packets vanish as they do at a wrong or firewalled host. No traffic leaves the namespace.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import PROCESS_TIMEOUT_S, clean_environ, torchrun
from tests.diagnose.conftest import PREFLIGHT, run_ranks, shown
from tests.support.netns import ip, scratch_namespaces

pytestmark = pytest.mark.multiprocess

NOBODY = "10.222.0.2"
# Far below torch's default rendezvous timeout (30 min for env://), the hang this prevents.
FAILS_WITHIN_S = 60


@pytest.fixture
def namespace() -> Iterator[str]:
    name = f"st-diag-{os.getpid()}"
    with scratch_namespaces(name):
        ip("-n", name, "link", "add", "hsn0", "type", "veth", "peer", "name", "hsn0-peer")
        ip("-n", name, "addr", "add", "10.222.0.1/24", "dev", "hsn0")
        for interface in ("hsn0", "hsn0-peer"):
            ip("-n", name, "link", "set", interface, "up")
        # A fixed neighbour entry: no ARP failure ('no route'), just silence, like a firewall.
        ip("-n", name, "neigh", "add", NOBODY, "lladdr", "02:00:00:00:00:02", "dev", "hsn0")
        yield name


def test_unreachable_rendezvous_fails_in_seconds_with_the_fix(namespace: str) -> None:
    inside = ["ip", "netns", "exec", namespace]
    started = time.monotonic()
    ranks = run_ranks(2, ["--rendezvous-timeout", "3"], master_addr=NOBODY, prefix=[inside, inside])
    elapsed = time.monotonic() - started
    assert [rank.returncode for rank in ranks] == [1, 1]
    assert elapsed < FAILS_WITHIN_S
    rank0, rank1 = shown(ranks[0]), shown(ranks[1])
    # Rank 0 must listen on MASTER_ADDR, which is not its own address.
    assert f"MASTER_ADDR resolves to {NOBODY}, which is not an address of" in rank0
    # Rank 1 tries to connect and gets no answer.
    assert f"{NOBODY}:" in rank1 and "gave no answer within 3 s (packets dropped" in rank1
    for output in (rank0, rank1):
        assert "fix: set MASTER_ADDR to the first host of the job" in output
        assert "Traceback" not in output


def test_socket_interfaces_that_exist_pass(namespace: str, tmp_path: Path) -> None:
    command = [
        "ip",
        "netns",
        "exec",
        namespace,
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        f"--log-dir={tmp_path}",  # not an empty torchelastic_* folder in $TMPDIR
        str(PREFLIGHT),
        "--verbose",
    ]
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT_S,
        # NCCL matches prefixes ('hsn' selects hsn0..hsn3); gloo wants exact names.
        env=clean_environ(NCCL_SOCKET_IFNAME="hsn", GLOO_SOCKET_IFNAME="hsn0"),
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "NCCL_SOCKET_IFNAME=hsn selects hsn0" in shown(result)
    assert "GLOO_SOCKET_IFNAME=hsn0 selects hsn0" in shown(result)


def test_socket_interface_missing_on_the_node_fails() -> None:
    result = torchrun(PREFLIGHT, nproc=2, environ=clean_environ(NCCL_SOCKET_IFNAME="hsn0,hsn1"))
    assert result.returncode != 0
    assert "NCCL_SOCKET_IFNAME=hsn0,hsn1 matches no interface of" in shown(result)
    assert "fix: set NCCL_SOCKET_IFNAME to interfaces this node has" in shown(result)
