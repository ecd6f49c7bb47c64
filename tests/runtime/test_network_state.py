"""What a rank reports about its node's network, measured in real network namespaces: a node
with a veth link named like LUMI's hsn0 to a master host in a second namespace, cut the way
the Slurm tests cut it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator

import pytest

from tests.support.netns import ip, scratch_namespaces

# A child process inside the namespace prints what the runtime sees there.
PROBE = (
    "import json, dataclasses\n"
    "from scaletrain.runtime.network import rendezvous_reachable, watched_interfaces\n"
    "import sys\n"
    "env = {'MASTER_ADDR': '10.223.0.2', 'MASTER_PORT': '29500'}\n"
    "env['GLOO_SOCKET_IFNAME'] = sys.argv[1]\n"
    "print(json.dumps({'interfaces': [dataclasses.asdict(i) for i in watched_interfaces(env)],"
    " 'rendezvous': rendezvous_reachable(env, 1.0)}))\n"
)


@pytest.fixture
def namespace() -> Iterator[tuple[str, str]]:
    """(the node's namespace, the master's)."""
    node, master = f"st-net-{os.getpid()}", f"st-net-{os.getpid()}-m"
    with scratch_namespaces(node, master):
        ip("-n", node, "link", "add", "hsn0", "type", "veth", "peer", "peer0", "netns", master)
        ip("-n", node, "addr", "add", "10.223.0.1/24", "dev", "hsn0")
        ip("-n", master, "addr", "add", "10.223.0.2/24", "dev", "peer0")
        for name, interface in ((node, "hsn0"), (master, "peer0")):
            ip("-n", name, "link", "set", interface, "up")
        yield node, master


def seen_from(namespace: str, gloo_interfaces: str = "hsn0") -> dict[str, object]:
    """What a rank there reports, told to use `gloo_interfaces` (GLOO_SOCKET_IFNAME)."""
    result = subprocess.run(
        ["ip", "netns", "exec", namespace, sys.executable, "-c", PROBE, gloo_interfaces],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    report: dict[str, object] = json.loads(result.stdout)
    return report


def settled(namespace: str, interfaces: list[dict[str, object]]) -> dict[str, object]:
    """What a rank there reports once it reports `interfaces`, or after 5 s: the kernel
    applies a lost carrier to the link's state (IFF_RUNNING) up to a second later (linkwatch)."""
    deadline = time.monotonic() + 5
    while (report := seen_from(namespace))["interfaces"] != interfaces:
        if time.monotonic() > deadline:
            break
        time.sleep(0.2)
    return report


def test_a_working_link_a_cut_link_and_a_lost_carrier(namespace: tuple[str, str]) -> None:
    node, master = namespace
    working = seen_from(node)
    assert working["interfaces"] == [
        {"name": "hsn0", "up": True, "running": True, "why": "GLOO_SOCKET_IFNAME"}
    ]
    assert working["rendezvous"] == "reachable"  # refused: the host answered
    ip("-n", master, "link", "set", "peer0", "down")  # the other end: carrier lost
    lost_carrier = [{"name": "hsn0", "up": True, "running": False, "why": "GLOO_SOCKET_IFNAME"}]
    assert settled(node, lost_carrier)["interfaces"] == lost_carrier
    ip("-n", node, "link", "set", "hsn0", "down")  # `ip link set hsn0 down` on the node
    cut = seen_from(node)
    assert cut["interfaces"] == [
        {"name": "hsn0", "up": False, "running": False, "why": "GLOO_SOCKET_IFNAME"},
        {"name": "(none)", "up": False, "running": False,
         "why": "no route to MASTER_ADDR 10.223.0.2"},
    ]  # fmt: skip
    assert cut["rendezvous"] == "10.223.0.2:29500: Network is unreachable"
    # Told nothing about interfaces (torchrun's default), the rank still names the one that
    # went down: it lost its route, not its address.
    assert seen_from(node, "")["interfaces"] == [
        {"name": "hsn0", "up": False, "running": False, "why": "has an address, no route"},
        {"name": "(none)", "up": False, "running": False,
         "why": "no route to MASTER_ADDR 10.223.0.2"},
    ]  # fmt: skip
