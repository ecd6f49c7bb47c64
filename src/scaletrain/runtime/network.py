"""The network as one node sees it: which interfaces carry training traffic, whether their
link is up, and whether the rendezvous host answers. Read with the kernel's own calls
(ioctl, connect), which see the network namespace the process runs in; /sys/class/net shows
the namespace that mounted /sys, which inside containers and test namespaces is another one.
"""

from __future__ import annotations

import fcntl
import socket
import struct
import time
from collections.abc import Iterable, Mapping
from typing import NamedTuple

from scaletrain.core.rank_files import InterfaceState

# <linux/sockios.h> and <net/if.h>
_SIOCGIFFLAGS = 0x8913
_SIOCGIFADDR = 0x8915
_IFF_UP = 0x1
_IFF_RUNNING = 0x40
_IFREQ_SIZE = 40
# Variables that name the interfaces of the collective libraries, and whether they take exact
# names (gloo) or prefixes (NCCL/RCCL).
_INTERFACE_VARIABLES = (("NCCL_SOCKET_IFNAME", False), ("GLOO_SOCKET_IFNAME", True))
# Seconds between connection attempts while waiting for rank 0 to listen.
_LISTEN_POLL_S = 0.01


def _matches(pattern: str, interface: str) -> bool:
    """NCCL's rule: '=eth0' is exact, 'eth' is a prefix."""
    return interface == pattern[1:] if pattern.startswith("=") else interface.startswith(pattern)


def select_interfaces(value: str, interfaces: Iterable[str], *, exact: bool = False) -> list[str]:
    """The interfaces a NCCL_SOCKET_IFNAME-style value selects ('^' excludes)."""
    interfaces = list(interfaces)
    exclude = value.startswith("^")
    patterns = [p for p in value.lstrip("^").split(",") if p]
    if exact:
        patterns = [f"={p.lstrip('=')}" for p in patterns]
    chosen = [i for i in interfaces if any(_matches(p, i) for p in patterns)]
    return [i for i in interfaces if i not in chosen] if exclude else chosen


def _ioctl(interface: str, request: int) -> bytes:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
        query = struct.pack(f"{_IFREQ_SIZE}s", interface.encode()[:15])
        return fcntl.ioctl(probe.fileno(), request, query)


def interface_state(interface: str, why: str = "") -> InterfaceState:
    """Whether `interface` is up and has its link, in this process's network namespace."""
    try:
        (flags,) = struct.unpack_from("H", _ioctl(interface, _SIOCGIFFLAGS), 16)
    except OSError:  # gone (a removed virtual interface)
        return InterfaceState(name=interface, up=False, running=False, why=why)
    return InterfaceState(
        name=interface, up=bool(flags & _IFF_UP), running=bool(flags & _IFF_RUNNING), why=why
    )


def interface_is_up(interface: str) -> bool:
    return interface_state(interface).working


def _address_of(interface: str) -> str | None:
    try:
        return socket.inet_ntoa(_ioctl(interface, _SIOCGIFADDR)[20:24])
    except OSError:  # no IPv4 address
        return None


def route_interface(host: str, port: int) -> str | None:
    """The interface this node would use to reach host:port; None when it has no route (or
    the host does not resolve). A UDP connect picks the route and sends nothing."""
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((host, port))
            source = probe.getsockname()[0]
    except OSError:
        return None
    return next(
        (name for _, name in socket.if_nameindex() if _address_of(name) == source),
        None,
    )


def watched_interfaces(environ: Mapping[str, str]) -> list[InterfaceState]:
    """The interfaces training traffic uses: those the collective libraries are told to use,
    and the one with the route to MASTER_ADDR. A node whose route is gone gets an entry for
    that too, since `ip link set ... down` removes the routes of the interface."""
    present = [name for _, name in socket.if_nameindex()]
    states = {
        name: interface_state(name, variable)
        for variable, exact in _INTERFACE_VARIABLES
        if environ.get(variable)
        for name in select_interfaces(environ[variable], present, exact=exact)
    }
    master, port = environ.get("MASTER_ADDR"), environ.get("MASTER_PORT", "0")
    if master and master not in ("localhost", "127.0.0.1"):
        routed = route_interface(master, int(port) if port.isdigit() else 0)
        if routed is None:
            # Taking an interface down removes its routes but keeps its address: name it.
            states |= {
                name: state
                for name in present
                if name not in states
                and name != "lo"
                and _address_of(name)
                and not (state := interface_state(name, "has an address, no route")).working
            }
            states["(route)"] = InterfaceState(
                name="(none)", up=False, running=False, why=f"no route to MASTER_ADDR {master}"
            )
        elif routed not in states and routed != "lo":
            states[routed] = interface_state(routed, f"route to MASTER_ADDR {master}")
    return list(states.values())


def rendezvous_reachable(environ: Mapping[str, str], timeout_s: float) -> str:
    """Whether MASTER_ADDR:MASTER_PORT accepts a TCP connection: 'reachable', or why not. A
    refused connection counts as reachable: the host answered."""
    host, port = environ.get("MASTER_ADDR"), environ.get("MASTER_PORT", "")
    if not host or not port.isdigit():
        return "unknown (no MASTER_ADDR/MASTER_PORT)"
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return "reachable"
    except ConnectionRefusedError:
        return "reachable"
    except TimeoutError:
        return f"{host}:{port} did not answer within {timeout_s:.0f} s"
    except OSError as error:
        return f"{host}:{port}: {error.strerror or error}"


class NumericAddress(NamedTuple):
    family: socket.AddressFamily
    address: str
    """Numeric: 10.0.0.1, fe80::1%hsn0."""


def store_address(host: str, port: int = 0) -> NumericAddress:
    """The address of `host` that torch's store client connects to: IPv4 when the name has
    both."""
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    infos.sort(key=lambda info: info[0] != socket.AF_INET)
    return NumericAddress(infos[0][0], str(infos[0][4][0]))


def agent_hosts_store(environ: Mapping[str, str]) -> bool:
    """True under torchrun sharing its agent's store, which listens before the workers start;
    otherwise rank 0 opens the store inside its init (srun, mpirun, a store per attempt)."""
    return environ.get("TORCHELASTIC_USE_AGENT_STORE", "") == "True"


def wait_until_listening(
    host: str,
    port: int,
    timeout_s: float,
    pause_s: float = _LISTEN_POLL_S,
    *,
    silence_s: float | None = None,
) -> OSError | None:
    """Return None once host:port accepts TCP connections; else why not: the refusal still
    met at the deadline (nothing listens), a TimeoutError (no answer at all: after
    `silence_s` of it, when given), or at once any other error, which waiting does not cure
    (unreachable, unresolvable).

    torch's store client waits 0.25-0.75 s after a refused connection, then 1.5 times as long
    after each next one (c10d's ExponentialBackoffWithJitter: 500 ms, jitter 0.5), so a rank
    that asks before rank 0 listens loses that much; asking here every `pause_s` (10 ms), it
    connects within that of rank 0 listening.
    """
    deadline = time.monotonic() + timeout_s
    last: OSError = TimeoutError(f"no connection within {timeout_s:g} s")
    while (left := deadline - time.monotonic()) > 0:
        try:
            with socket.create_connection((host, port), timeout=min(left, silence_s or left)):
                return None
        except ConnectionRefusedError as refused:
            last = refused
            time.sleep(min(pause_s, max(deadline - time.monotonic(), 0)))
        except TimeoutError as silence:
            if silence_s is not None:
                return silence
            last = silence
        except OSError as lasting:
            return lasting
    return last
