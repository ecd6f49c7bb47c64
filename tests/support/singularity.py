"""`singularity` and `apptainer` for the test cluster: their command line on bubblewrap.

LUMI runs PyTorch in Singularity images (`singularity run IMAGE cmd ...`); Debian has neither
Singularity nor Apptainer. This stand-in runs the image that container.py builds the way
Singularity 3.x and Apptainer 1.x run theirs (their user docs: "Bind Paths and Mounts",
"Environment and Metadata"), so that LUMI-shaped jobs really run in a container here:

- `run IMAGE [cmd ...]` runs the image's runscript with the arguments; `exec IMAGE cmd ...`
  runs cmd. The image is a squashfs file (Singularity runs those too), mounted with squashfuse.
- Binds: `--bind/-B src[:dest[:opts]]` (comma-separated, repeatable), then APPTAINER_BIND or
  SINGULARITY_BIND and ..._BINDPATH, appended to the flags' as Singularity does; opts `ro`,
  `rw`, `image-src=/path` (a squashfs file, mounted, its /path bound at dest). Inside, both
  SINGULARITY_BIND and APPTAINER_BIND list what was asked for.
- Environment: the host's passes in, except PATH (the image's, with Singularity's default
  folders), LD_LIBRARY_PATH (/.singularity.d/libs) and PS1; a variable the image sets wins
  over the host's; SINGULARITYENV_NAME (APPTAINERENV_NAME, which wins) sets NAME over both,
  ..._PREPEND_PATH and ..._APPEND_PATH extend PATH. SINGULARITY_CONTAINER, _NAME, _COMMAND.
- Visible inside: the image's files, the host's /usr, /etc, /bin, /lib* read-only (standing
  for the image's OS), /dev, /proc, /sys, $HOME, /tmp, /var/tmp, the current folder, the
  binds. Network, hostname and processes are the host's, as with Singularity.
- Signals sent to `singularity` go on to the container's process (under Slurm, which signals
  every process of a step, it gets Slurm's and the forwarded one); its exit status is ours.

What differs from a real image and runtime:
- The image's OS is the host's, and its Python is this test venv's interpreter: the image
  names host folders (the interpreter's installation, the test venv's site-packages) that are
  bound read-only, the site-packages at a path of the image's own (see container.py). The
  host's /usr holds more than an image would (Lmod, compilers, Debian's python3) and no ROCm.
- The checkout is visible inside only as the current folder or a bind, as any host folder;
  the image's Python never uses its .venv (scaletrain comes only from a venv you bind in).
- Slurm's client commands in the host's /usr/bin are covered by /dev/null (not executable),
  so no PATH lookup finds them, as in LUMI's containers; `ls` still lists the names.
- A bind's destination must be a new folder outside the image's folders, or exist already:
  nothing creates mount points inside the read-only image (Singularity's underlay does).
- No `shell`, `instance`, `build`, --nv/--rocm, --cleanenv, --env, --contain, overlays; every
  process runs as the calling user (root in the tests) with the host's capabilities. A
  command that `exec` cannot find fails with env's message and 127 (Singularity: 255).

How: bubblewrap's monitoring process, which stays between this one and the container, dies
of any signal but SIGCHLD, and Slurm signals every process of a step: bubblewrap and
squashfuse start with the forwarded signals blocked, and the container's first command,
`env --default-signal`, unblocks them before it runs the runscript or the command.
Standard library only: container.write_commands writes wrappers that run it with `python -I -S`.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

ACTIONS = ("run", "exec")
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
METADATA = ".singularity.d/stand-in.json"
"""In the image: its environment and the host folders it needs (written by container.py)."""
RUNSCRIPT = "/.singularity.d/runscript"
LIBRARIES = "/.singularity.d/libs"
# The host's folders that stand for the image's operating system (read-only).
OS_FOLDERS = ("usr", "etc", "bin", "sbin", "lib", "lib32", "lib64", "libx32")
# Debian's slurm-client: hidden inside, as LUMI's containers have no Slurm commands.
SLURM_COMMANDS = (
    "sacct", "sacctmgr", "salloc", "sattach", "sbatch", "sbcast", "scancel", "scontrol",
    "scrontab", "sdiag", "sh5util", "sinfo", "sprio", "squeue", "sreport", "srun", "sshare",
    "sstat", "strigger",
)  # fmt: skip
# Signals passed on to the container; one ignored when this starts stays ignored inside
# (bubblewrap and the container inherit that), as with Singularity.
FORWARDED_SIGNALS = [
    sig
    for sig in (signal.SIGHUP, signal.SIGINT, signal.SIGQUIT, signal.SIGTERM, signal.SIGUSR1,
                signal.SIGUSR2)
    if signal.getsignal(sig) != signal.SIG_IGN
]  # fmt: skip
MOUNT_TIMEOUT_S = 30.0
_LIBC = ctypes.CDLL(None, use_errno=True)
_PR_SET_PDEATHSIG = 1
_MNT_DETACH = 2


class StandInError(Exception):
    """A request this stand-in (or Singularity) refuses; printed as Singularity's FATAL line."""


@dataclass(frozen=True, slots=True)
class Invocation:
    """One command line: the action, its --bind values, the image and the command."""

    action: str
    binds: tuple[str, ...]
    image: Path
    command: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Bind:
    """One bind, parsed: a host path (or a path inside a squashfs image) at `destination`."""

    source: Path
    destination: str
    read_only: bool = False
    image_source: str | None = None
    """The folder inside `source` (a squashfs file) to bind, for `image-src=`."""


def parse_command_line(args: Sequence[str]) -> Invocation:
    """`run|exec [--bind SPEC | -B SPEC]... IMAGE [command...]`; flags end at the image."""
    if not args or args[0] not in ACTIONS:
        given = args[0] if args else "nothing"
        raise StandInError(f"unknown command {given!r}: this stand-in knows {', '.join(ACTIONS)}")
    action, rest = args[0], list(args[1:])
    binds = []
    while rest and rest[0].startswith("-"):
        flag = rest.pop(0)
        if flag in ("-B", "--bind") and rest:
            binds.append(rest.pop(0))
        elif flag.startswith("--bind="):
            binds.append(flag.removeprefix("--bind="))
        elif flag.startswith("-B") and len(flag) > 2:
            binds.append(flag[2:])
        else:
            raise StandInError(f"unknown flag or missing value: {flag}")
    if not rest or (action == "exec" and len(rest) < 2):
        command = "cmd [args ...]" if action == "exec" else "[cmd args ...]"
        raise StandInError(f"usage: {action} [--bind SPEC]... IMAGE {command}")
    return Invocation(action, tuple(binds), Path(rest[0]), tuple(rest[1:]))


def bind_requests(invocation: Invocation, environ: Mapping[str, str]) -> list[str]:
    """The bind specifications asked for: the flags', then the environment's (appended)."""
    from_environment = [_setting(environ, "BIND"), _setting(environ, "BINDPATH")]
    return [*invocation.binds, *(value for value in from_environment if value)]


def _setting(environ: Mapping[str, str], name: str) -> str | None:
    """APPTAINER_<name>, else the older SINGULARITY_<name> (Apptainer's order)."""
    return environ.get(f"APPTAINER_{name}") or environ.get(f"SINGULARITY_{name}")


def parse_binds(requests: Sequence[str], cwd: Path) -> list[Bind]:
    """Each comma-separated `src[:dest[:opts]]` of the requests; relative sources from cwd."""
    binds = []
    for item in (item for request in requests for item in request.split(",") if item):
        source, *rest = item.split(":")
        destination = rest[0] if rest and rest[0] else source
        read_only, image_source = False, None
        for option in rest[1:]:
            if option in ("ro", "rw"):
                read_only = option == "ro"
            elif option.startswith("image-src="):
                image_source = option.removeprefix("image-src=")
            else:
                raise StandInError(f"{item}: unknown bind option {option!r} (ro, rw, image-src=)")
        if not destination.startswith("/"):
            raise StandInError(f"{item}: the destination must be an absolute path")
        path = cwd / source
        if not path.exists():
            raise StandInError(f"mount {source}->{destination}: mount source {path} doesn't exist")
        binds.append(Bind(path, destination, read_only, image_source))
    return binds


def container_environ(
    host: Mapping[str, str], image: Mapping[str, str], invocation: Invocation, binds: str
) -> dict[str, str]:
    """The environment inside: the host's, then the image's, then SINGULARITYENV_ values."""
    injected: dict[str, str] = {}
    for prefix in ("SINGULARITYENV_", "APPTAINERENV_"):  # Apptainer's prefix wins
        injected.update(
            {
                name.removeprefix(prefix): value
                for name, value in host.items()
                if name.startswith(prefix)
            }
        )
    injected.pop("", None)
    replaced = {"PATH", "LD_LIBRARY_PATH", "PS1"}
    environ = {
        name: value
        for name, value in host.items()
        if name not in replaced and not name.startswith(("SINGULARITYENV_", "APPTAINERENV_"))
    }
    environ.update(image)
    path = image.get("PATH", DEFAULT_PATH).split(":")
    path += [folder for folder in DEFAULT_PATH.split(":") if folder not in path]
    prepend, append = injected.pop("PREPEND_PATH", ""), injected.pop("APPEND_PATH", "")
    environ.update(injected)
    parts = [prepend, injected.get("PATH", ":".join(path)), append]
    environ["PATH"] = ":".join(part for part in parts if part)
    environ["LD_LIBRARY_PATH"] = LIBRARIES
    environ["PS1"] = "Singularity> "
    for runtime in ("SINGULARITY", "APPTAINER"):
        environ[f"{runtime}_COMMAND"] = invocation.action
        environ[f"{runtime}_CONTAINER"] = str(invocation.image.absolute())
        environ[f"{runtime}_NAME"] = invocation.image.name
        environ[f"{runtime}_BIND"] = binds
    return environ


def bwrap_arguments(
    image_root: Path,
    host_folders: Sequence[tuple[str, str]],
    binds: Sequence[tuple[Path, Bind]],
    *,
    home: Path,
    cwd: Path,
) -> list[str]:
    """bubblewrap's mounts: the OS, the image, what it needs from the host, the default
    folders, the binds (each as (host path to mount, bind)), and Slurm's commands hidden."""
    arguments = ["--dev-bind", "/dev", "/dev", "--proc", "/proc", "--ro-bind", "/sys", "/sys"]
    for name in OS_FOLDERS:
        folder = Path("/", name)
        if folder.is_symlink():  # merged /usr: /bin -> usr/bin
            arguments += ["--symlink", str(folder.readlink()), str(folder)]
        elif folder.is_dir():
            arguments += ["--ro-bind", str(folder), str(folder)]
    for entry in sorted(image_root.iterdir()):
        arguments += ["--ro-bind", str(entry), f"/{entry.name}"]
    for source, destination in host_folders:
        arguments += ["--ro-bind", source, destination]
    bound = [Path("/", name) for name in OS_FOLDERS]
    for folder in (Path("/tmp"), Path("/var/tmp"), home, cwd):
        if folder.is_dir() and not any(folder.is_relative_to(seen) for seen in bound):
            arguments += ["--bind", str(folder), str(folder)]
            bound.append(folder)
    for path, bind in binds:
        arguments += ["--ro-bind" if bind.read_only else "--bind", str(path), bind.destination]
    for command in SLURM_COMMANDS:
        for path in (Path("/usr/bin", command), Path("/usr/sbin", command)):
            if path.exists():
                arguments += ["--ro-bind", "/dev/null", str(path)]
    return [*arguments, "--chdir", str(cwd)]


@contextlib.contextmanager
def squashfs_mounted(image: Path) -> Iterator[Path]:
    """The squashfs file mounted read-only (squashfuse) in a temporary folder, while inside.

    squashfuse runs as long as the container: it starts with the forwarded signals blocked
    (Slurm signals every process of a step, and it would end, leaving the container without
    its files) and ends when its file system is unmounted after the container, or is killed
    with this process (its mount then stays until unmounted, as a killed Singularity's)."""
    if not image.is_file():
        raise StandInError(f"could not open image {image}: no such file")
    mountpoint = Path(tempfile.mkdtemp(prefix="singularity-mount-"))
    fuse = subprocess.Popen(
        [_find("squashfuse"), "-f", str(image), str(mountpoint)],
        stdin=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        preexec_fn=_shielded,
    )
    try:
        deadline = time.monotonic() + MOUNT_TIMEOUT_S
        while not os.path.ismount(mountpoint):
            if fuse.poll() is not None or time.monotonic() > deadline:
                message = fuse.stderr.read().decode(errors="replace") if fuse.stderr else ""
                raise StandInError(f"could not mount {image} (squashfs?): {message.strip()}")
            time.sleep(0.005)
        yield mountpoint
    finally:
        _LIBC.umount2(str(mountpoint).encode(), _MNT_DETACH)
        try:
            fuse.wait(timeout=10)
        except subprocess.TimeoutExpired:
            fuse.kill()
            fuse.wait()
        with contextlib.suppress(OSError):
            mountpoint.rmdir()


def run(invocation: Invocation, environ: Mapping[str, str]) -> int:
    """Run the invocation in its container; the command's exit status."""
    cwd = Path.cwd()
    requests = bind_requests(invocation, environ)
    binds = parse_binds(requests, cwd)
    with contextlib.ExitStack() as mounts:
        root = mounts.enter_context(squashfs_mounted(invocation.image))
        metadata = json.loads((root / METADATA).read_text(encoding="utf-8"))
        sources = []
        for bind in binds:
            path = bind.source
            if bind.image_source is not None:
                path = mounts.enter_context(squashfs_mounted(bind.source))
                path = path / bind.image_source.lstrip("/")
            sources.append((path, bind))
        home = Path(environ.get("HOME", "/"))
        mounting = bwrap_arguments(root, metadata["host_folders"], sources, home=home, cwd=cwd)
        inside = container_environ(environ, metadata["environment"], invocation, ",".join(requests))
        command = [RUNSCRIPT] if invocation.action == "run" else []
        command += invocation.command
        return _supervise([_find("bwrap"), "--die-with-parent", *mounting], command, inside)


def _supervise(bwrap: list[str], command: Sequence[str], environ: dict[str, str]) -> int:
    """Start bubblewrap, pass signals on to the container's process, return its exit status.

    bubblewrap's monitoring process would die of any signal but SIGCHLD (and take the
    container with it): it starts with the forwarded signals blocked, and `env
    --default-signal` unblocks them in the container."""
    target: list[int] = []

    def forward(number: int, frame: FrameType | None) -> None:
        if target:
            with contextlib.suppress(ProcessLookupError):
                os.kill(target[0], number)

    for sig in FORWARDED_SIGNALS:
        signal.signal(sig, forward)

    info_read, info_write = os.pipe()
    unblock = ",".join(sig.name.removeprefix("SIG") for sig in FORWARDED_SIGNALS)
    bubblewrap = subprocess.Popen(
        [*bwrap, "--info-fd", str(info_write), "--", "/usr/bin/env"]
        + ([f"--default-signal={unblock}"] if unblock else [])
        + list(command),
        env=environ,
        pass_fds=(info_write,),
        preexec_fn=_shielded,
    )
    os.close(info_write)
    with os.fdopen(info_read, encoding="utf-8") as info:  # bubblewrap closes it once started
        text = info.read()
    if text:
        target.append(int(json.loads(text)["child-pid"]))
    status = bubblewrap.wait()
    return 128 - status if status < 0 else status


def _find(command: str) -> str:
    found = shutil.which(command) or shutil.which(command, path="/usr/bin:/bin")
    if found is None:
        raise StandInError(
            f"{command} is not installed. HINT: bash scripts/install-slurm.sh (as root) installs "
            "bubblewrap, squashfs-tools and squashfuse."
        )
    return found


def _shielded() -> None:
    """In a child before exec: the forwarded signals blocked, and SIGKILL when this process
    dies, however it dies."""
    signal.pthread_sigmask(signal.SIG_BLOCK, FORWARDED_SIGNALS)
    _LIBC.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def main(args: Sequence[str]) -> int:
    """`singularity ARGS...`: run the container, or print why not and return 255."""
    try:
        return run(parse_command_line(args), os.environ)
    except StandInError as error:
        print(f"FATAL:   {error}", file=sys.stderr)
        return 255


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
