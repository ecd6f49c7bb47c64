"""Network namespaces that make one machine look like several hosts on one network.

Each node gets its own network namespace with one interface named like LUMI's high-speed
network (hsn0) and an address in a private /24; all node interfaces hang off a bridge that
lives in a namespace of its own. Nothing is added to the machine's own network: the root
namespace gets no interface and no address, so two instances (or other helpers' tests) can
never collide even if their subnets are equal.

Commands run "on" a node with `node_command`: its network namespace plus a private mount
namespace (for a private /etc/hosts) and UTS namespace (for its own hostname).
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

NETNS_DIR = Path("/run/netns")
# LUMI's Slingshot interfaces are hsn0..hsn3; jobs there set NCCL_SOCKET_IFNAME=hsn0,...
INTERFACE = "hsn0"


@dataclass(frozen=True, kw_only=True, slots=True)
class NodeNetwork:
    """The namespaces and addresses of one test cluster's nodes."""

    bridge_namespace: str
    namespaces: dict[str, str]
    """node name -> its network namespace (under /run/netns)."""
    addresses: dict[str, str]
    """node name -> its IPv4 address on INTERFACE."""

    def hosts_file_text(self) -> str:
        """/etc/hosts as every node sees it: the nodes resolve to their private addresses."""
        lines = ["127.0.0.1 localhost"]
        lines += [f"{address} {node}" for node, address in self.addresses.items()]
        return "\n".join(lines) + "\n"

    def namespace_ids(self) -> list[str]:
        """`readlink /proc/self/ns/net` as seen by a process on each node."""
        return [f"net:[{(NETNS_DIR / ns).stat().st_ino}]" for ns in self.namespaces.values()]


def _ip(*args: str) -> None:
    subprocess.run(["ip", *args], check=True, capture_output=True, text=True, timeout=30)


def create_network(prefix: str, nodes: Sequence[str], subnet: str) -> NodeNetwork:
    """Namespaces `<prefix>-<node>` joined by a bridge in `<prefix>-net`; subnet is 'a.b.c'."""
    network = NodeNetwork(
        bridge_namespace=f"{prefix}-net",
        namespaces={node: f"{prefix}-{node}" for node in nodes},
        addresses={node: f"{subnet}.{index}" for index, node in enumerate(nodes, start=1)},
    )
    bridge_ns = network.bridge_namespace
    bridge = prefix[:15]  # Linux's limit for interface names
    _ip("netns", "add", bridge_ns)
    _ip("-n", bridge_ns, "link", "add", bridge, "type", "bridge")
    _ip("-n", bridge_ns, "link", "set", bridge, "up")
    for node, namespace in network.namespaces.items():
        _ip("netns", "add", namespace)
        # Created inside the bridge namespace, the node end moved straight into the node's:
        # no interface ever appears in the machine's own namespace.
        _ip(
            "-n",
            bridge_ns,
            "link",
            "add",
            node,
            "type",
            "veth",
            "peer",
            INTERFACE,
            "netns",
            namespace,
        )
        _ip("-n", bridge_ns, "link", "set", node, "master", bridge, "up")
        _ip("-n", namespace, "addr", "add", f"{network.addresses[node]}/24", "dev", INTERFACE)
        _ip("-n", namespace, "link", "set", INTERFACE, "up")
        _ip("-n", namespace, "link", "set", "lo", "up")
    return network


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
        _ip("netns", "delete", namespace)  # the veth pairs and the bridge go with them


def _signal(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError):  # it ended meanwhile
        os.kill(pid, sig)
