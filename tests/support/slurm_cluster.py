"""A real multi-node Slurm cluster on this one machine, started and stopped by the tests.

Each node (n1, n2, ...) is a network namespace with its own hostname, a private /etc/hosts
and an interface hsn0 (see netns.py); slurmctld and one slurmd per node run inside them from
Debian's slurm-wlm, with a munged of our own. Config, state and logs live in a fresh folder.
Jobs therefore see what they see on a real cluster: SLURM_JOB_NODELIST=n[1-2], `hostname`
n1/n2, and `MASTER_ADDR=n1` resolving to the first node's address.

Usage in a test (the `slurm_cluster` fixture in tests/conftest.py starts one per session)::

    @pytest.mark.slurm
    def test_job(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
        result = slurm_cluster.run(["sbatch", "--parsable", str(script)], cwd=tmp_path)
        assert slurm_cluster.wait_for_job(result.stdout.strip()) == "COMPLETED"

`cluster.environ()` is an environment whose PATH finds sbatch, squeue, scontrol, ... as on a
login node (small wrappers that enter n1), for code that looks the commands up itself, and
`singularity`/`apptainer` (container.py), which jobs find there too, as on LUMI's nodes.
`cluster.container_image` is a LUMI-shaped image for them, `cluster.container_venv` a venv
made inside it with scaletrain (`scaletrain submit --container IMAGE --venv VENV`).

Gotchas found on the way (Debian 12, Slurm 22.05, no systemd):
- `ip netns exec` remounts /sys and slurmd then fails on cgroups: enter with
  `nsenter --net=... unshare --mount --uts --propagation private` instead.
- Clients must run inside a node's namespaces too: the controller's address exists only there.
- slurmctld checks that its hostname is SlurmctldHost's name: it runs with hostname n1.
- munged refuses a socket whose directories are not executable by all: pytest's tmp folder is
  0700, so munged's files go to a separate 0755 folder. Slurm finds our munged through
  AuthInfo=socket=...; the machine's own munged (if any) is neither used nor touched.
- A missing config makes Slurm's commands retry for up to 60 s: always pass SLURM_CONF.
- Accounting is off unless asked for (`running_cluster(accounting=True)`, slurm_accounting.py:
  MariaDB and slurmdbd on n1, ~4 s more to start); without it sacct fails with "accounting
  storage is disabled", and finished jobs stay visible in scontrol for MinJobAge (300 s).
- A requeued job starts again only after cred_expire (~12 s here, ~121 s by default). Do not
  shorten that with `scontrol update jobid=<id> StartTime=now`: the rerun then often fails at
  once ("Killing non-startable batch JobId=1: Job credential revoked", state FAILED).
- A node drained by a bad config stays drained across restarts: state starts empty each time.
- slurmd leaves running jobs behind when it stops: teardown ends every process left in the
  nodes' namespaces (all of them started by this cluster), then deletes the namespaces.
- Daemons get PR_SET_PDEATHSIG, so they end with the pytest process even if it is killed.
"""

from __future__ import annotations

import ctypes
import os
import secrets
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from string import Template

from scaletrain.slurm import commands as slurm
from tests.conftest import clean_environ, free_port
from tests.support.container import ContainerImage, build_image, make_image_venv, write_commands
from tests.support.module_stack import ModuleStack, build_module_stack, make_user_venv
from tests.support.netns import NodeNetwork, create_network, delete_network, node_command
from tests.support.slurm_accounting import AccountingPorts, slurm_conf_lines, start_accounting

CLIENT_COMMANDS = ("sbatch", "squeue", "scontrol", "scancel", "sinfo", "sacct", "srun", "salloc")
DAEMONS = ("slurmctld", "slurmd", "munged", "mungekey")
ACCOUNTING_DAEMONS = ("slurmdbd", "mariadbd")
NODE_CPUS = 4
PARTITION = "debug"
READY_TIMEOUT_S = 30.0
# Daemons, not scripts: /usr/sbin is missing from some PATHs.
_SEARCH_PATH = f"{os.environ.get('PATH', '')}:/usr/sbin:/usr/bin:/sbin:/bin"


class SlurmCluster:
    """A running test cluster: run Slurm commands on it and wait for its jobs."""

    def __init__(
        self,
        name: str,
        folder: Path,
        network: NodeNetwork,
        munge_folder: Path,
        modules: ModuleStack,
        *,
        accounting: bool = False,
    ) -> None:
        self.name = name
        self.accounting = (
            AccountingPorts(database=free_port(), slurmdbd=free_port()) if accounting else None
        )
        """Where MariaDB and slurmdbd listen on n1; None: no accounting (sacct fails)."""
        self.modules = modules
        """The site's software: Lmod and its `pytorch` module (module_stack.py)."""
        self.folder = folder
        self.network = network
        self.nodes = tuple(network.namespaces)
        self.conf = folder / "slurm.conf"
        self.hosts_file = folder / "hosts"
        self.bin = folder / "bin"
        self.munge_folder = munge_folder
        self._daemons: dict[str, subprocess.Popen[bytes]] = {}
        self._user_venv: Path | None = None
        self._image: ContainerImage | None = None
        self._container_venv: Path | None = None

    @property
    def user_venv(self) -> Path:
        """A user's venv over the `pytorch` module with scaletrain in it, made on first use
        (a few seconds) as the docs say; generated jobs are submitted from it."""
        if self._user_venv is None:
            self._user_venv = make_user_venv(self.modules, self.folder / "user")
        return self._user_venv

    @property
    def container_image(self) -> Path:
        """A LUMI-shaped image (container.py: torch, no scaletrain), built on first use (about
        a second, once per machine); jobs run it with `singularity run` as on LUMI."""
        return self._container().path

    @property
    def container_venv(self) -> Path:
        """A venv made inside that image with scaletrain in it (docs/site-lumi.md), made on
        first use (a few seconds); jobs put its bin/ first with SINGULARITYENV_PREPEND_PATH."""
        if self._container_venv is None:
            user = self.folder / "container-user"
            self._container_venv = make_image_venv(self._container(), user)
        return self._container_venv

    def _container(self) -> ContainerImage:
        if self._image is None:
            self._image = build_image()
        return self._image

    @property
    def slurm_addresses(self) -> dict[str, str]:
        """Where Slurm's daemons reach each node: the management network if the cluster has
        one, else the nodes' one network (where their names resolve)."""
        return self.network.management_addresses or self.network.addresses

    def environ(self, **extra: str) -> dict[str, str]:
        """A clean environment whose PATH finds this cluster's Slurm commands first."""
        base = clean_environ()
        return {
            **base,
            "PATH": f"{self.bin}:{base['PATH']}",
            "SLURM_CONF": str(self.conf),
            # Jobs inherit it: their temporary files (torchrun's empty torchelastic_* folder
            # per start) stay with the cluster's files, as a site's per-job TMPDIR would.
            "TMPDIR": str(self.folder / "tmp"),
            **extra,
        }

    def run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
        timeout: float = 60.0,
    ) -> subprocess.CompletedProcess[str]:
        """Run a command (sbatch, squeue, scontrol, ...) on n1, the cluster's login node."""
        return subprocess.run(
            [*self._login_prefix(), f"--wd={cwd or Path.cwd()}", *argv],
            env={**self.environ(), **(env or {})},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def wait_for_job(self, job_id: str, timeout: float = 120.0) -> str:
        """Wait until the job ended; its final state (COMPLETED, FAILED, CANCELLED, ...)."""
        deadline = time.monotonic() + timeout
        info = None
        while time.monotonic() < deadline:
            info = slurm.job_info(job_id, environ=self.environ())
            if info is None or not info.is_active:
                return info.state if info else "UNKNOWN"
            time.sleep(0.5)
        raise AssertionError(
            f"job {job_id} did not end within {timeout:.0f} s (last: {info})\n{self.logs()}"
        )

    def logs(self, lines: int = 30) -> str:
        """The end of every daemon's log, for failure messages."""
        parts = []
        for log in sorted([*(self.folder / "log").glob("*"), *self.munge_folder.glob("*.log")]):
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            parts.append(f"--- {log.name}\n" + "\n".join(tail))
        return "\n".join(parts)

    def _login_prefix(self) -> list[str]:
        """Enter the namespaces of n1's slurmctld: network, mounts (/etc/hosts), hostname."""
        controller = self._daemons["slurmctld"].pid
        return ["nsenter", f"--target={controller}", "--net", "--mount", "--uts"]

    def _start(self) -> None:
        for sub in ("state", "log", "spool", "tmp"):
            (self.folder / sub).mkdir()
        munge_socket = self.munge_folder / "munge.socket"
        self._start_munged(munge_socket)
        self._write_config(munge_socket)
        first = self.nodes[0]
        if self.accounting is not None:
            start_accounting(
                folder=self.folder,
                node_prefix=self._on(first),
                host=first,
                ports=self.accounting,
                address=self.slurm_addresses[first],
                munge_socket=munge_socket,
                spawn=self._spawn,
                find=_find,
            )
        self._spawn("slurmctld", [*self._on(first), _find("slurmctld"), "-D", "-f", str(self.conf)])
        for node in self.nodes:
            (self.folder / "spool" / node).mkdir(parents=True)
            (self.folder / "tmp" / node).mkdir(parents=True)
            command = [*self._on(node), _find("slurmd"), "-D", "-N", node, "-f", str(self.conf)]
            self._spawn(f"slurmd-{node}", command)
        self._write_wrappers()
        self._wait_until_idle()

    def _on(self, node: str) -> list[str]:
        return node_command(self.network, node, self.hosts_file)

    def _start_munged(self, munge_socket: Path) -> None:
        key_folder = self.munge_folder / "key"
        key_folder.mkdir(mode=0o700)
        key = key_folder / "munge.key"
        subprocess.run([_find("mungekey"), "--create", f"--keyfile={key}"], check=True, timeout=30)
        self._spawn(
            "munged",
            [
                _find("munged"),
                "--foreground",
                f"--socket={munge_socket}",
                f"--key-file={key}",
                f"--pid-file={self.munge_folder / 'munged.pid'}",
                f"--seed-file={self.munge_folder / 'munged.seed'}",
                f"--log-file={self.munge_folder / 'munged.log'}",
            ],
        )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not munge_socket.exists():
            if time.monotonic() > deadline or self._daemons["munged"].poll() is not None:
                raise RuntimeError(f"munged did not start\n{self.logs()}")
            time.sleep(0.05)

    def _write_config(self, munge_socket: Path) -> None:
        self.hosts_file.write_text(self.network.hosts_file_text())
        node_lines = [
            f"NodeName={node} NodeAddr={address} CPUs={NODE_CPUS}"
            for node, address in self.slurm_addresses.items()
        ]
        first = self.nodes[0]
        template = Template((Path(__file__).with_name("slurm.conf.in")).read_text())
        self.conf.write_text(
            template.substitute(
                cluster_name=self.name,
                controller=first,
                controller_address=self.slurm_addresses[first],
                controller_port=free_port(),
                node_port=free_port(),
                munge_socket=munge_socket,
                folder=self.folder,
                node_lines="\n".join(node_lines),
                partition=PARTITION,
                accounting=(
                    slurm_conf_lines(self.slurm_addresses[first], self.accounting, munge_socket)
                    if self.accounting is not None
                    else "AccountingStorageType=accounting_storage/none"
                ),
            )
        )

    def _write_wrappers(self) -> None:
        """sbatch & co. for PATH: on a node (inside a job) as they are, elsewhere on n1."""
        self.bin.mkdir()
        # `case` patterns: net:[4026532177] with the brackets escaped.
        on_a_node = "|".join(
            name.replace("[", "\\[").replace("]", "\\]") for name in self.network.namespace_ids()
        )
        login = " ".join(self._login_prefix())
        for command in CLIENT_COMMANDS:
            real = _find(command)
            wrapper = self.bin / command
            wrapper.write_text(
                # bash, not sh: dash drops exported functions (BASH_FUNC_module%%) from the
                # environment, and sbatch must pass Lmod's `module` on to jobs.
                "#!/bin/bash\n"
                f"# Slurm's {command} for the test cluster in {self.folder}.\n"
                f'case "$(readlink /proc/self/ns/net)" in {on_a_node}) exec {real} "$@" ;; esac\n'
                f'exec {login} --wd="$PWD" {real} "$@"\n'
            )
            wrapper.chmod(0o755)
        write_commands(self.bin)

    def _spawn(self, name: str, command: list[str]) -> subprocess.Popen[bytes]:
        with (self.folder / "log" / f"{name}.out").open("wb") as output:
            self._daemons[name] = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                env={**clean_environ(), "SLURM_CONF": str(self.conf)},
                preexec_fn=_end_with_parent,
            )
        return self._daemons[name]

    def _wait_until_idle(self) -> None:
        deadline = time.monotonic() + READY_TIMEOUT_S
        states: dict[str, str] = {}
        while time.monotonic() < deadline:
            ended = [name for name, daemon in self._daemons.items() if daemon.poll() is not None]
            if ended:
                raise RuntimeError(f"{', '.join(ended)} ended while starting\n{self.logs()}")
            result = self.run(["sinfo", "--noheader", "--Node", "--format=%N %T"], timeout=30)
            states = dict(line.split() for line in result.stdout.splitlines() if line.strip())
            if all(states.get(node) == "idle" for node in self.nodes):
                return
            time.sleep(0.2)
        raise RuntimeError(
            f"the test cluster's nodes did not become idle within {READY_TIMEOUT_S:.0f} s "
            f"(sinfo: {states or 'no answer'})\n{self.logs()}"
        )

    def _stop(self) -> None:
        # Controller and node daemons first (they would log errors about each other), then
        # accounting (slurmctld sends it the last records as it stops), munged last.
        last = ("slurmdbd", "mariadbd", "munged")
        stop_order = sorted(
            self._daemons, key=lambda name: last.index(name) if name in last else -1
        )
        for daemon in (self._daemons[name] for name in stop_order):
            if daemon.poll() is None:
                daemon.terminate()
                try:
                    daemon.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    daemon.kill()
                    daemon.wait(timeout=10)


@contextmanager
def running_cluster(
    folder: Path, nodes: int = 2, *, management_network: bool = False, accounting: bool = False
) -> Iterator[SlurmCluster]:
    """Start a cluster of `nodes` nodes with its state in `folder`; stop and remove it after.

    With `management_network`, Slurm talks over a network of its own (nmn0) and training over
    hsn0, as on real clusters: a cut hsn0 link then leaves Slurm in control of the node. With
    `accounting`, sacct knows every job and each of its runs (slurm_accounting.py)."""
    needed = [*DAEMONS, *CLIENT_COMMANDS, "nsenter", "ip"]
    if accounting:
        needed += ACCOUNTING_DAEMONS
    missing = [name for name in needed if not _which(name)]
    if missing:
        raise RuntimeError(
            f"cannot start the test Slurm cluster: {', '.join(missing)} not installed. "
            "Run `bash scripts/install-slurm.sh` as root (scripts/test.sh does)."
        )
    # Unique per instance: two test sessions on one machine never share a name.
    instance = f"st{os.getpid()}{secrets.token_hex(2)}"
    subnet = f"10.{200 + secrets.randbelow(50)}.{secrets.randbelow(256)}"
    management = f"{subnet.rsplit('.', 1)[0]}.{(int(subnet.rsplit('.', 1)[1]) + 1) % 256}"
    names = [f"n{index}" for index in range(1, nodes + 1)]
    network = create_network(instance, names, subnet, management if management_network else None)
    munge_folder = Path(tempfile.mkdtemp(prefix=f"{instance}-munge-"))
    munge_folder.chmod(0o755)
    modules = build_module_stack()
    cluster = SlurmCluster(instance, folder, network, munge_folder, modules, accounting=accounting)
    try:
        cluster._start()
        yield cluster
    finally:
        cluster._stop()
        delete_network(network)
        shutil.rmtree(munge_folder, ignore_errors=True)


def _which(name: str) -> str | None:
    return shutil.which(name, path=_SEARCH_PATH)


def _find(name: str) -> str:
    path = _which(name)
    assert path is not None, f"{name} is not installed"
    return path


_PR_SET_PDEATHSIG = 1


def _end_with_parent() -> None:
    """In the child before exec: get SIGTERM when the test process dies, however it dies."""
    ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
