"""Start torchrun's Python while `scaletrain run` is still reading its command line.

torchrun's process spends most of its start-up importing torch (1.4 s here, far longer from
a venv on Lustre); `scaletrain run` spends ~0.15 s importing its CLI and reading its options
before it knows what to launch. Started first, the launcher imports torch meanwhile on
another core and then waits for its command on a pipe, so `scaletrain run` reaches the first
step as soon as plain torchrun does (benchmarks/startup.py). A command that ends without
launching (an error, --help) ends the waiting process with it: it gets SIGTERM when this
process ends (PR_SET_PDEATHSIG) and never prints a word.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import IO

from scaletrain.core.parent_death import die_with_parent

# torch.distributed.run with the script's arguments kept away from its parser.
TORCHRUN_ENTRY = "scaletrain.launch.torchrun.entry"
# The entry's first argument when its command comes on a pipe (the file descriptor follows).
COMMAND_FROM_FD = "--command-from-fd"


@dataclass(frozen=True, slots=True)
class _WaitingLauncher:
    process: subprocess.Popen[bytes]
    command_pipe: int


_waiting: _WaitingLauncher | None = None


def start_torchrun_early() -> None:
    """Start the torchrun entry now, to be given its command by `start_torchrun` (once).

    Nothing happens where torch is missing: the command then fails with its own clean error.
    """
    global _waiting
    if _waiting is not None or importlib.util.find_spec("torch") is None:
        return
    read_end, write_end = os.pipe()
    parent = os.getpid()
    # -u: unbuffered, as PYTHONUNBUFFERED=1 makes the launcher started later (local_run.py),
    # so that rank 0's echoed output reaches a pipe line by line.
    process = subprocess.Popen(
        [sys.executable, "-u", "-m", TORCHRUN_ENTRY, COMMAND_FROM_FD, str(read_end)],
        pass_fds=(read_end,),
        preexec_fn=lambda: _launcher_setup(parent),
    )
    os.close(read_end)
    _waiting = _WaitingLauncher(process, write_end)


def start_torchrun(
    command: Sequence[str], environ: Mapping[str, str], *, stdout: IO[str] | None = None
) -> subprocess.Popen[bytes]:
    """Start `python -m <torchrun entry> ...`: the launcher started early when there is one,
    else a new process. It gets SIGTERM when this process ends (it then ends the workers)."""
    global _waiting
    waiting, _waiting = _waiting, None
    if waiting is not None and list(command[:3]) == [sys.executable, "-m", TORCHRUN_ENTRY]:
        message = {
            "arguments": list(command[3:]),
            "environ": dict(environ),
            "stdout_to_stderr": stdout is sys.stderr,
        }
        try:
            with os.fdopen(waiting.command_pipe, "w") as pipe:
                pipe.write(json.dumps(message))
            return waiting.process
        except BrokenPipeError:  # it ended (e.g. a broken torch install): start anew
            waiting.process.wait()
    elif waiting is not None:
        os.close(waiting.command_pipe)
    parent = os.getpid()
    return subprocess.Popen(
        list(command),
        env=dict(environ),
        stdout=stdout,
        preexec_fn=lambda: _launcher_setup(parent),
    )


def _launcher_setup(parent: int) -> None:
    """In the launcher's process before it starts: SIGTERM when `parent` ends, and a process
    group of its own, so that Ctrl-C at the terminal reaches `scaletrain run` alone, which
    then stops the run as SIGTERM does (torchrun would pass SIGINT on: KeyboardInterrupt in
    every rank, no checkpoint)."""
    die_with_parent(parent, sent=signal.SIGTERM)
    os.setpgid(0, 0)


def receive_command(pipe_fd: int) -> list[str] | None:
    """In the early-started entry: wait for the command; take its environment and output.

    None when the command line ended without a launch (the pipe closed empty).
    """
    with os.fdopen(pipe_fd) as pipe:
        text = pipe.read()
    if not text:
        return None
    message = json.loads(text)
    os.environ.clear()
    os.environ.update(message["environ"])
    # Temporary files go where the new environment says (TMPDIR: the run's own folder).
    tempfile.tempdir = None
    if message["stdout_to_stderr"]:
        sys.stdout.flush()
        os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    arguments: list[str] = message["arguments"]
    return arguments
