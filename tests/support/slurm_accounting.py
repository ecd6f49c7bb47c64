"""Slurm's accounting on the test cluster (`running_cluster(accounting=True)`): a MariaDB and
slurmdbd on the first node, so that `sacct` answers as it does at a site.

Both run on n1 beside slurmctld: MariaDB on n1's loopback (its own port, data in the
cluster's folder, no grant tables: any user, no password), slurmdbd on n1's address. They add
about 4 s to the cluster's start (MariaDB 0.4 s from an empty data folder, no
`mariadb-install-db`; slurmdbd ~1 s making its tables; slurmctld ~2 s registering the cluster),
so only clusters that ask for accounting have it.

Gotchas:
- MariaDB refuses to run as root unless told `--user=root`.
- slurmdbd reads slurmdbd.conf from SLURM_CONF's folder and refuses one that others may read.
- Messages to slurmdbd are signed through AccountingStoragePass's munge socket, not AuthInfo's.
- slurmctld registers the cluster in the database by itself on its first start; jobs need no
  account (AccountingStorageEnforce is unset).
- No acct_gather_energy plugin: sacct's ConsumedEnergyRaw is 0 for every job, as at a site
  that does not measure energy.
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from string import Template

READY_TIMEOUT_S = 30.0

# name, command -> the started daemon (SlurmCluster._spawn: its log, ended with the tests).
Spawn = Callable[[str, list[str]], "subprocess.Popen[bytes]"]


@dataclass(frozen=True, kw_only=True, slots=True)
class AccountingPorts:
    database: int
    slurmdbd: int


def slurm_conf_lines(address: str, ports: AccountingPorts, munge_socket: Path) -> str:
    """slurm.conf's accounting settings: jobs are recorded by slurmdbd at `address`."""
    return "\n".join(
        [
            "AccountingStorageType=accounting_storage/slurmdbd",
            f"AccountingStorageHost={address}",
            f"AccountingStoragePort={ports.slurmdbd}",
            # The munged that signs messages to slurmdbd: ours (AuthInfo's socket is not used
            # for them), not the machine's /run/munge.
            f"AccountingStoragePass={munge_socket}",
        ]
    )


def start_accounting(
    *,
    folder: Path,
    node_prefix: list[str],
    host: str,
    address: str,
    ports: AccountingPorts,
    munge_socket: Path,
    spawn: Spawn,
    find: Callable[[str], str],
) -> None:
    """Start MariaDB, then slurmdbd, on the node `node_prefix` enters; return once both serve."""
    data = folder / "database"
    data.mkdir()
    socket = folder / "database.socket"
    database = spawn(
        "mariadbd",
        [
            *node_prefix,
            find("mariadbd"),
            "--no-defaults",
            f"--datadir={data}",
            f"--socket={socket}",
            f"--port={ports.database}",
            "--bind-address=127.0.0.1",
            "--user=root",
            "--skip-grant-tables",
            "--skip-name-resolve",
            "--skip-log-bin",
            # Small and quick: a few jobs' records, never the machine's memory.
            "--innodb-buffer-pool-size=32M",
            "--innodb-log-file-size=8M",
            "--innodb-flush-log-at-trx-commit=0",
            f"--pid-file={folder / 'mariadbd.pid'}",
            f"--log-error={folder / 'log' / 'mariadbd.log'}",
        ],
    )
    _wait_for(lambda: socket.exists(), database, "MariaDB", folder)
    config = folder / "slurmdbd.conf"
    template = Template(Path(__file__).with_name("slurmdbd.conf.in").read_text())
    config.write_text(
        template.substitute(
            munge_socket=munge_socket,
            host=host,
            address=address,
            port=ports.slurmdbd,
            folder=folder,
            database_port=ports.database,
        )
    )
    config.chmod(0o600)
    log = folder / "log" / "slurmdbd.log"
    slurmdbd = spawn("slurmdbd", [*node_prefix, find("slurmdbd"), "-D"])
    _wait_for(lambda: log.exists() and " started" in log.read_text(), slurmdbd, "slurmdbd", folder)


def _wait_for(
    ready: Callable[[], bool], daemon: subprocess.Popen[bytes], name: str, folder: Path
) -> None:
    deadline = time.monotonic() + READY_TIMEOUT_S
    while not ready():
        if daemon.poll() is not None or time.monotonic() > deadline:
            logs = "\n".join(
                f"--- {path.name}\n{path.read_text(errors='replace')[-3000:]}"
                for path in sorted((folder / "log").glob("*"))
                if path.name.startswith(("mariadbd", "slurmdbd"))
            )
            raise RuntimeError(f"{name} did not start\n{logs}")
        time.sleep(0.05)
