"""Network namespaces that make one machine look like several hosts on one network.

Each node gets its own network namespace with one interface named like LUMI's high-speed
network (hsn0) and an address in a private /24; all node interfaces hang off a bridge that
lives in a namespace of its own. Optionally each node also gets a management interface (nmn0,
as HPE Cray names its node management network) on a second /24 and bridge: Slurm talks over
it, training over hsn0, as on a real cluster, so cutting hsn0 leaves Slurm in control.
Nothing is added to the machine's own network: the root namespace gets no interface and no
address, so two instances (or other helpers' tests) can never collide even if their subnets
are equal.

Commands run "on" a node with `node_command`: its network namespace plus a private mount
namespace (for a private /etc/hosts) and UTS namespace (for its own hostname).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pytest

NETNS_DIR = Path("/run/netns")
# LUMI's Slingshot interfaces are hsn0..hsn3; jobs there set NCCL_SOCKET_IFNAME=hsn0,...
INTERFACE = "hsn0"
MANAGEMENT_INTERFACE = "nmn0"


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeNetwork:
    """The namespaces and addresses of one test cluster's nodes."""

    bridge_namespace: str
    namespaces: dict[str, str]
    """node name -> its network namespace (under /run/netns)."""
    addresses: dict[str, str]
    """node name -> its IPv4 address on INTERFACE (what the node's name resolves to)."""
    management_addresses: dict[str, str] = field(default_factory=dict)
    """node name -> its IPv4 address on MANAGEMENT_INTERFACE; empty without that network."""

    def hosts_file_text(self) -> str:
        """/etc/hosts as every node sees it: the nodes resolve to their private addresses."""
        lines = ["127.0.0.1 localhost"]
        lines += [f"{address} {node}" for node, address in self.addresses.items()]
        return "\n".join(lines) + "\n"

    def namespace_ids(self) -> list[str]:
        """`readlink /proc/self/ns/net` as seen by a process on each node."""
        return [f"net:[{(NETNS_DIR / ns).stat().st_ino}]" for ns in self.namespaces.values()]


def ip(*args: str) -> None:
    """`ip ARGS...` (iproute2), failing the test with ip's own message."""
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


@contextlib.contextmanager
def scratch_namespaces(*names: str) -> Iterator[None]:
    """Empty network namespaces with their loopback up, for one test, deleted afterwards
    (with what it added to them); the test is skipped where none can be made (no root)."""
    try:
        ip("netns", "add", names[0])
    except (subprocess.CalledProcessError, FileNotFoundError) as error:
        pytest.skip(f"cannot create a network namespace here: {error}")
    made = [names[0]]
    try:
        for name in names[1:]:
            ip("netns", "add", name)
            made.append(name)
        for name in names:
            ip("-n", name, "link", "set", "lo", "up")
        yield
    finally:
        for name in made:
            subprocess.run(["ip", "netns", "del", name], capture_output=True, timeout=30)


def create_network(
    prefix: str, nodes: Sequence[str], subnet: str, management_subnet: str | None = None
) -> NodeNetwork:
    """Namespaces `<prefix>-<node>` joined by a bridge in `<prefix>-net`; subnets are 'a.b.c'.

    With `management_subnet`, a second bridge joins every node's MANAGEMENT_INTERFACE."""
    network = NodeNetwork(
        bridge_namespace=f"{prefix}-net",
        namespaces={node: f"{prefix}-{node}" for node in nodes},
        addresses=_addresses(nodes, subnet),
        management_addresses=_addresses(nodes, management_subnet) if management_subnet else {},
    )
    ip("netns", "add", network.bridge_namespace)
    for namespace in network.namespaces.values():
        ip("netns", "add", namespace)
        ip("-n", namespace, "link", "set", "lo", "up")
    _attach(network, network.addresses, bridge=prefix[:15], interface=INTERFACE, suffix="")
    if network.management_addresses:
        bridge = f"m{prefix}"[:15]
        _attach(network, network.management_addresses, bridge, MANAGEMENT_INTERFACE, suffix="m")
    return network


def _addresses(nodes: Sequence[str], subnet: str) -> dict[str, str]:
    return {node: f"{subnet}.{index}" for index, node in enumerate(nodes, start=1)}


def _attach(
    network: NodeNetwork, addresses: dict[str, str], bridge: str, interface: str, suffix: str
) -> None:
    """A bridge in the bridge namespace, and on every node `interface` with its address."""
    bridge_ns = network.bridge_namespace
    ip("-n", bridge_ns, "link", "add", bridge, "type", "bridge")
    ip("-n", bridge_ns, "link", "set", bridge, "up")
    for node, namespace in network.namespaces.items():
        # Created inside the bridge namespace, the node end moved straight into the node's:
        # no interface ever appears in the machine's own namespace.
        port = f"{node}{suffix}"
        ip(
            "-n", bridge_ns, "link", "add", port, "type", "veth",
            "peer", interface, "netns", namespace,
        )  # fmt: skip
        ip("-n", bridge_ns, "link", "set", port, "master", bridge, "up")
        ip("-n", namespace, "addr", "add", f"{addresses[node]}/24", "dev", interface)
        ip("-n", namespace, "link", "set", interface, "up")


def set_link(network: NodeNetwork, node: str, *, up: bool) -> None:
    """Take a node's training interface (INTERFACE) down or bring it back: a real link cut."""
    ip("-n", network.namespaces[node], "link", "set", INTERFACE, "up" if up else "down")


def node_command(network: NodeNetwork, node: str, hosts_file: Path) -> list[str]:
    """Prefix that runs a command on `node`: its network, hostname and /etc/hosts.

    `ip netns exec` would also do, but it remounts /sys, after which slurmd fails on cgroups;
    nsenter + unshare leave /sys alone. The bind mount is private: the real /etc/hosts stays.
    """
    setup = 'mount --bind "$1" /etc/hosts && echo "$2" > /proc/sys/kernel/hostname'
    return [
        "nsenter",
        f"--net={NETNS_DIR / network.namespaces[node]}",
        "unshare",
        "--mount",
        "--uts",
        "--propagation",
        "private",
        "sh",
        "-c",
        f'{setup} && shift 2 && exec "$@"',
        "sh",
        str(hosts_file),
        node,
    ]


def pids_in(namespace: str) -> list[int]:
    """Processes living in a network namespace (jobs' leftovers after slurmd stopped)."""
    result = subprocess.run(
        ["ip", "netns", "pids", namespace], capture_output=True, text=True, timeout=30
    )
    return [int(pid) for pid in result.stdout.split()]


def delete_network(network: NodeNetwork) -> None:
    """End what still runs on the nodes (all started by this cluster), then drop the namespaces."""
    namespaces = [*network.namespaces.values(), network.bridge_namespace]
    existing = [ns for ns in namespaces if (NETNS_DIR / ns).exists()]
    # Job processes get SIGTERM and 5 s to end, as from scancel; then SIGKILL.
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for namespace in existing:
            for pid in pids_in(namespace):
                _signal(pid, sig)
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline and any(pids_in(ns) for ns in existing):
            time.sleep(0.1)
    for namespace in existing:
        ip("netns", "delete", namespace)  # the veth pairs and the bridge go with them


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
        os.kill(pid, sig)
