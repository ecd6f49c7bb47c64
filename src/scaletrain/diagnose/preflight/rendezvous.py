"""Can this rank reach the rendezvous (MASTER_ADDR:MASTER_PORT)? Asked before joining the
process group, so that a wrong address fails in seconds instead of hanging every rank.

Who listens differs by launcher: torchrun's agent opens the store before it starts the
workers, so every worker can connect at once; under srun, mpirun or hand-set variables
rank 0 opens it inside init_process_group, so rank 0 checks that the address is its own
and the port is free, and the other ranks retry until rank 0 listens.

Rank 0 may take minutes to get there: importing torch from a busy parallel file system on
hundreds of nodes at once does. So "nothing listens yet" is waited for as long as torchrun
waits for its nodes to join (600 s by default, SCALETRAIN_RENDEZVOUS_TIMEOUT), saying so every
30 s, while "no answer at all" (a wrong address, a firewall) fails after 10 s, and an
unreachable address at once. Rank 0 notes in the run folder when it started and what it is
doing (preflight-rank0.json), so that a rank that waits in vain says what it found.
"""

from __future__ import annotations

import contextlib
import errno
import ipaddress
import json
import os
import socket
import sys
import time
from collections.abc import Mapping
from typing import Any

from scaletrain.core.rank_files import now_iso, seconds_since, write_json
from scaletrain.core.run_folder import RunFolder
from scaletrain.diagnose.preflight.results import CheckResult, fail, ok
from scaletrain.runtime.layout import ProcessLayout
from scaletrain.runtime.network import agent_hosts_store, store_address, wait_until_listening

NAME = "rendezvous"
# Pause between connection attempts while rank 0 is still starting, in seconds.
_RETRY_PAUSE_S = 0.2
# No answer at all for this long: packets are dropped (a wrong address, a firewall).
_SILENCE_S = 10.0
# A waiting rank says so this often.
_PROGRESS_S = 30.0
# What rank 0 is doing, as preflight-rank0.json says.
IMPORTING = "importing torch"
JOINING = "listening for the other ranks"
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


def note_rank0(folder: RunFolder | None, environ: Mapping[str, str], phase: str) -> None:
    """Rank 0: note what it is doing, for the ranks waiting for it to listen."""
    if folder is None:
        return
    record = {"launch": _launch(environ), "host": socket.gethostname(), "pid": os.getpid()}
    previous = _read_rank0(folder, environ) or {}
    started = previous.get("started") if previous.get("pid") == os.getpid() else None
    record |= {"started": started or now_iso(), "phase": phase}
    with contextlib.suppress(OSError):  # an unwritable run folder is the run-folder check's
        write_json(folder.preflight_start, record)


def _launch(environ: Mapping[str, str]) -> str:
    """This launch of the preflight: the Slurm job step, else the rendezvous address."""
    if environ.get("SLURM_JOB_ID") and environ.get("SLURM_STEP_ID"):
        return f"{environ['SLURM_JOB_ID']}.{environ['SLURM_STEP_ID']}"
    return f"{environ.get('MASTER_ADDR')}:{environ.get('MASTER_PORT')}"


def _read_rank0(folder: RunFolder | None, environ: Mapping[str, str]) -> dict[str, Any] | None:
    """What rank 0 of this launch noted, or None (nothing yet, or an earlier launch's)."""
    if folder is None:
        return None
    try:
        record = json.loads(folder.preflight_start.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and record.get("launch") == _launch(environ) else None


def _rank0_state(folder: RunFolder | None, environ: Mapping[str, str]) -> str:
    rank0 = _read_rank0(folder, environ)
    if rank0 is None:
        return "rank 0 has not started its preflight yet"
    return f"rank 0 on {rank0.get('host')} started {_age(rank0)} ago and is {rank0.get('phase')}"


def _age(rank0: dict[str, Any]) -> str:
    try:
        return f"{seconds_since(str(rank0.get('started'))):.0f} s"
    except ValueError:
        return "some time"


def _connect(
    address: str,
    port: int,
    timeout_s: float,
    who: str,
    folder: RunFolder | None,
    environ: Mapping[str, str],
) -> CheckResult:
    """Connect until it works, or nothing listened for `timeout_s`, or no answer came."""
    started, silence_s = time.monotonic(), min(_SILENCE_S, timeout_s)
    while True:
        left = timeout_s - (time.monotonic() - started)
        error = wait_until_listening(
            address, port, min(left, _PROGRESS_S), pause_s=_RETRY_PAUSE_S, silence_s=silence_s
        )
        waited = time.monotonic() - started
        if error is None:
            return ok(NAME, f"reached {address}:{port} in {waited * 1000:.0f} ms")
        if not isinstance(error, ConnectionRefusedError) or waited >= timeout_s:
            break
        print(
            f"scaletrain preflight: {who} waits for rank 0 to listen at {address}:{port} "
            f"({waited:.0f} s of at most {timeout_s:g}): {_rank0_state(folder, environ)}",
            file=sys.stderr,
            flush=True,
        )
    if isinstance(error, TimeoutError):
        return fail(
            NAME,
            f"{address}:{port} gave no answer within {silence_s:g} s (packets dropped: a wrong "
            "address or a firewall)",
            _FIX_ADDRESS,
        )
    if not isinstance(error, ConnectionRefusedError):  # unreachable: waiting does not help
        return fail(NAME, f"cannot reach {address}:{port}: {error.strerror}", _FIX_ADDRESS)
    return _nothing_listened(address, port, timeout_s, _read_rank0(folder, environ))


def _nothing_listened(
    address: str, port: int, timeout_s: float, rank0: dict[str, Any] | None
) -> CheckResult:
    """Rank 0 did not listen in time: say what rank 0 noted, and the fix for that."""
    problem = f"nothing listened at {address}:{port} for {timeout_s:g} s"
    if rank0 is None:
        return fail(
            NAME,
            f"{problem}, and rank 0 never started its preflight (nothing from it in the run "
            "folder)",
            "see rank 0's output in the job's log: it stopped or never started",
        )
    where = rank0.get("host")
    if rank0.get("phase") == IMPORTING:
        return fail(
            NAME,
            f"{problem}: rank 0 on {where} started {_age(rank0)} ago and was still importing torch",
            "rank 0 starts slowly (a busy file system): wait longer, "
            "SCALETRAIN_RENDEZVOUS_TIMEOUT=1200, or keep your venv in one squashfs file "
            "(docs/site-lumi.md)",
        )
    return fail(
        NAME,
        f"{problem}: rank 0 on {where} listens, but not where this rank looks",
        _FIX_ADDRESS,
    )


def check_rendezvous(
    layout: ProcessLayout,
    environ: Mapping[str, str],
    timeout_s: float,
    folder: RunFolder | None = None,
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
    who = f"rank {layout.rank} ({where})"
    return _connect(address, port, timeout_s, who, folder, environ)
