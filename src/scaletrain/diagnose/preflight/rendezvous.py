"""Can this rank reach the rendezvous (MASTER_ADDR:MASTER_PORT)? Asked before joining the
process group, so that a wrong address fails in seconds instead of hanging every rank.

Who listens differs by launcher: torchrun's agent opens the store before it starts the
workers, so every worker can connect at once; under srun, mpirun or hand-set variables
rank 0 opens it inside init_process_group, so rank 0 checks that the address is its own
and the port is free, and the other ranks retry until rank 0 listens.
"""

from __future__ import annotations

import errno
import ipaddress
import socket
import time
from collections.abc import Mapping

from scaletrain.diagnose.preflight.results import CheckResult, fail, ok
from scaletrain.runtime.layout import ProcessLayout
from scaletrain.runtime.network import agent_hosts_store, store_address, wait_until_listening

NAME = "rendezvous"
# Pause between connection attempts while rank 0 is still starting, in seconds.
_RETRY_PAUSE_S = 0.2
_FIX_ADDRESS = (
    "set MASTER_ADDR to the first host of the job, as every node resolves it: "
    'MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)'
)


def _check_listen(family: socket.AddressFamily, address: str, port: int, where: str) -> CheckResult:
    """Rank 0 of srun/mpirun jobs: the address must be this node's and the port free."""
    with socket.socket(family, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((address, port))
        except OSError as error:
            if error.errno == errno.EADDRINUSE:
                return fail(
                    NAME,
                    f"port {port} on {where} is already in use (another job or a leftover run)",
                    "use a port of this job: MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000)), "
                    "or stop the leftover process",
                )
            return fail(
                NAME,
                f"MASTER_ADDR resolves to {address}, which is not an address of {where}, "
                "where rank 0 must listen",
                _FIX_ADDRESS,
            )
    return ok(NAME, f"rank 0 will listen on {address}:{port} ({where})")


def _connect(address: str, port: int, timeout_s: float) -> CheckResult:
    """Connect until it works or `timeout_s` passes; refused means 'not listening yet'."""
    started = time.monotonic()
    error = wait_until_listening(address, port, timeout_s, pause_s=_RETRY_PAUSE_S)
    if error is None:
        waited_ms = (time.monotonic() - started) * 1000
        return ok(NAME, f"reached {address}:{port} in {waited_ms:.0f} ms")
    if isinstance(error, ConnectionRefusedError):
        problem = "connection refused: nothing listens there"
    elif isinstance(error, TimeoutError):
        problem = "no answer (packets dropped: wrong address or a firewall)"
    else:  # no route to host, network unreachable: waiting did not help
        return fail(NAME, f"cannot reach {address}:{port}: {error.strerror}", _FIX_ADDRESS)
    return fail(
        NAME,
        f"{address}:{port} did not accept a connection within {timeout_s:g} s ({problem})",
        _FIX_ADDRESS + "; check that rank 0 started (its log) and that the port is open",
    )


def check_rendezvous(
    layout: ProcessLayout, environ: Mapping[str, str], timeout_s: float
) -> CheckResult:
    """Resolve MASTER_ADDR, then listen-test it (rank 0 hosting) or connect to it."""
    if layout.world_size == 1:
        return ok(NAME, "single process: no rendezvous")
    host, port, where = layout.master_addr, layout.master_port, socket.gethostname()
    try:
        family, address = store_address(host, port)
    except socket.gaierror as error:
        return fail(NAME, f"MASTER_ADDR={host} does not resolve on {where}: {error}", _FIX_ADDRESS)
    if layout.num_nodes > 1 and ipaddress.ip_address(address.split("%")[0]).is_loopback:
        return fail(
            NAME,
            f"MASTER_ADDR={host} is {address}, a loopback address: "
            f"the other {layout.num_nodes - 1} node(s) cannot reach it",
            _FIX_ADDRESS,
        )
    if layout.rank == 0 and not agent_hosts_store(environ):
        return _check_listen(family, address, port, where)
    return _connect(address, port, timeout_s)
