"""`scaletrain run`: start N processes on this machine with torch.distributed.run.

No launcher of our own: torchrun starts, watches and restarts the workers; this module
builds its command line, prepares the run folder, announces the launch and records how the
run ended. One path for `scaletrain run` (your script), `check` and `bench` (scaletrain's
in-job entry points, started as modules so that the worker's sys.path stays the user's).
"""

from __future__ import annotations

import dataclasses
import getpass
import importlib.util
import json
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from types import FrameType

from rich.text import Text

from scaletrain import __version__
from scaletrain.core import console, in_job_modules, variables
from scaletrain.core.cpus import allowed_cpus
from scaletrain.core.errors import ScaletrainError
from scaletrain.core.hang_report import (
    DEFAULT_HANG_LIMIT_S,
    HANG_EXIT_STATUS,
    HangReport,
)
from scaletrain.core.run_folder import RunFolder, default_run_name
from scaletrain.core.run_record import SEPARATOR
from scaletrain.launch.early_start import TORCHRUN_ENTRY, start_torchrun
from scaletrain.launch.sampler_process import start_sampler, stop_sampler
from scaletrain.launch.shell_text import check_job_name
from scaletrain.launch.watchdog.local import LocalWatchdog, end_at_once
from scaletrain.planning.modes import launch_mode

# Before torchrun's options: the run's TMPDIR, which torchrun removes when it ends.
SCRATCH_OPTION = "--scratch="
# Lines of another rank's error log worth showing: the end of its traceback.
_TAIL_LINES = 15


@dataclass(frozen=True, kw_only=True, slots=True)
class LocalLaunch:
    """What to start: a script, its arguments, how many processes, and where to record it."""

    program: str
    """A script's path, or a module name when `as_module` (like `python -m`)."""
    as_module: bool = False
    script_args: tuple[str, ...] = ()
    nproc: str = "1"
    """A number, or 'gpu' for one process per visible GPU (torchrun decides)."""
    run_folder: RunFolder
    max_restarts: int = 0
    """Restarts of all processes after one fails; each restart resumes from the newest
    checkpoint when the script uses a scaletrain Checkpointer."""
    hang_limit_s: float = DEFAULT_HANG_LIMIT_S
    """The hang watchdog ends the run when no rank finishes a step for this long (or 20
    median steps, if longer); 0: no watchdog."""
    python: str = field(default=sys.executable)
    scratch: Path
    """The run's own TMPDIR: made when it starts, removed with what is in it when it ends, so
    that what killed processes leave there (multiprocessing's pymp-* folders, torchrun's
    logs) does not outlive the run."""


@dataclass(frozen=True, slots=True)
class LocalRunResult:
    exit_code: int
    duration_s: float
    hang: HangReport | None = None
    """The watchdog's report when it ended a hung run (exit code HANG_EXIT_STATUS)."""


def local_launch(
    program: str,
    *,
    as_module: bool = False,
    args: tuple[str, ...] = (),
    nproc: str,
    name: str | None,
    runs_dir: Path,
    max_restarts: int = 0,
    hang_limit_s: float = DEFAULT_HANG_LIMIT_S,
) -> LocalLaunch:
    """A checked local launch of a script (or module) into runs_dir/<name>; the name defaults
    to `<script>-<date>-<time>`."""
    stem = program.rsplit(".", 1)[-1] if as_module else Path(program).stem
    run_name = check_job_name(name, "run name") if name else None
    folder = RunFolder(runs_dir / (run_name or default_run_name(stem, datetime.now())))
    launch = LocalLaunch(
        program=program,
        as_module=as_module,
        script_args=args,
        nproc=nproc,
        run_folder=folder,
        max_restarts=max_restarts,
        scratch=Path(tempfile.gettempdir()) / f"scaletrain-{folder.name}-{os.getpid()}",
        hang_limit_s=hang_limit_s,
    )
    check_launchable(launch)
    return launch


def check_launchable(launch: LocalLaunch) -> None:
    """Fail before starting anything when the script or torch is missing."""
    if launch.as_module:
        if importlib.util.find_spec(launch.program) is None:
            raise ScaletrainError(
                f"There is no Python module {launch.program!r}.",
                "check the module name, or install the package that provides it.",
            )
    elif not Path(launch.program).is_file():
        raise ScaletrainError(
            f"The training script {launch.program!r} does not exist.",
            "give the path of your script relative to this folder, e.g. examples/mnist/train.py.",
        )
    if launch.python == sys.executable and importlib.util.find_spec("torch") is None:
        raise ScaletrainError(
            f"PyTorch is not installed in this Python ({sys.executable}).",
            "pip install 'scaletrain[torch]', or load the PyTorch module/container of your site.",
        )
    if launch.nproc != "gpu" and (not launch.nproc.isdigit() or int(launch.nproc) < 1):
        raise ScaletrainError(
            f"--nproc {launch.nproc!r} is not a number of processes.",
            "use a positive number (e.g. --nproc 2) or --nproc gpu for one per visible GPU.",
        )


def torchrun_command(launch: LocalLaunch) -> list[str]:
    """The command that runs torch.distributed.run for a local launch."""
    return [
        launch.python,
        "-m",
        TORCHRUN_ENTRY,
        f"{SCRATCH_OPTION}{launch.scratch}",
        # A private rendezvous on a free local port: two runs on one machine never collide.
        "--standalone",
        f"--nproc-per-node={launch.nproc}",
        f"--max-restarts={launch.max_restarts}",
        f"--log-dir={launch.run_folder.logs}",
        "--logs-specs=scaletrain",
        # Every rank's output goes to its own file; only rank 0 is echoed to the console.
        "--redirects=3",
        "--tee=3",
        "--local-ranks-filter=0",
        *(["--module"] if launch.as_module else []),
        SEPARATOR,
        launch.program,
        *launch.script_args,
    ]


def launch_variables(launch: LocalLaunch, environ: Mapping[str, str], cpus: int) -> dict[str, str]:
    """Variables this launch adds to the workers' environment (each is shown to the user)."""
    added = {
        variables.RUN_DIR: str(launch.run_folder.root.resolve()),
        "TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[rank${rank}] ",
        "PYTHONUNBUFFERED": "1",
        variables.HANG_LIMIT: f"{launch.hang_limit_s:g}",
    }
    added |= launch_mode("torchrun").environment(on_cpus=False, max_restarts=launch.max_restarts)
    if "OMP_NUM_THREADS" not in environ and launch.nproc.isdigit():
        # torchrun would set 1; an equal share of the cores is faster on CPU runs.
        added["OMP_NUM_THREADS"] = str(max(1, cpus // int(launch.nproc)))
    # torch.compile keeps its cache where it would without the run's own TMPDIR.
    added[variables.TORCHINDUCTOR_CACHE_DIR] = str(launch.scratch.parent / _inductor_folder())
    kept = {name: value for name, value in added.items() if name not in environ}
    return kept | {variables.TMPDIR: str(launch.scratch)}


def _inductor_folder() -> str:
    """torch's default cache folder name under the temporary folder: torchinductor_<user>."""
    try:
        return f"torchinductor_{getpass.getuser()}"
    except (KeyError, OSError):  # no user name (a container without /etc/passwd entry)
        return "torchinductor"


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def run_local(
    launch: LocalLaunch, variables: Mapping[str, str], *, output_to_stderr: bool = False
) -> LocalRunResult:
    """Start torchrun, forward SIGINT/SIGTERM to it, wait, and record the run in run.json.

    `output_to_stderr`: what the processes print goes to stderr, leaving stdout to the
    command's own result (`--json`).
    """
    folder = launch.run_folder.create()
    command = torchrun_command(launch)
    record: dict[str, object] = {
        "name": folder.name,
        "command": command,
        "nproc": launch.nproc,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "scaletrain_version": __version__,
        "started": _now(),
        "variables": dict(variables),
    }
    folder.run_record.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    shutil.rmtree(folder.ranks, ignore_errors=True)  # heartbeats of an earlier run
    started = time.perf_counter()
    launch.scratch.mkdir(parents=True, exist_ok=True)
    # torchrun ends its training processes when it ends; it ends when this process does,
    # even when this one is killed outright (no signal to forward then).
    child = start_torchrun(
        command, {**os.environ, **variables}, stdout=sys.stderr if output_to_stderr else None
    )

    interrupts = 0

    def forward(signum: int, _frame: FrameType | None) -> None:
        child.send_signal(signum)

    def interrupt(_signum: int, _frame: FrameType | None) -> None:
        """Ctrl-C stops as SIGTERM does (a checkpoint, then the same command resumes); a
        second one ends every process at once."""
        nonlocal interrupts
        interrupts += 1
        if interrupts == 1:
            _say_now(
                "scaletrain: Ctrl-C: saving a checkpoint and stopping (a script without a "
                "Checkpointer just stops); Ctrl-C again ends every process at once"
            )
            child.send_signal(signal.SIGTERM)
        else:
            _say_now("scaletrain: Ctrl-C again: ending every process now")
            end_at_once(folder, child)

    previous = {
        signal.SIGINT: signal.signal(signal.SIGINT, interrupt),
        signal.SIGTERM: signal.signal(signal.SIGTERM, forward),
    }
    watchdog = LocalWatchdog(folder, launch.hang_limit_s, child)
    try:
        exit_code = child.wait()
    finally:
        watchdog.stop()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        shutil.rmtree(launch.scratch, ignore_errors=True)
    duration = time.perf_counter() - started
    hang = watchdog.report
    if hang is not None:
        exit_code = HANG_EXIT_STATUS
        record["hang"] = hang.to_dict()
    record |= {"finished": _now(), "exit_code": exit_code, "duration_s": round(duration, 3)}
    folder.run_record.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    return LocalRunResult(exit_code=exit_code, duration_s=duration, hang=hang)


def _say_now(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def start_local(
    program: str,
    *,
    as_module: bool = False,
    args: Sequence[str],
    nproc: str,
    name: str | None,
    runs_dir: Path,
    environ: Mapping[str, str],
    max_restarts: int = 0,
    hang_limit_s: float = 0.0,
    variables: Mapping[str, str] | None = None,
    monitor_interval_s: float | None = None,
    instrumented: bool = False,
    output_to_stderr: bool = False,
) -> tuple[RunFolder, LocalRunResult]:
    """Check, announce and run a local launch; return its run folder and result. With
    `monitor_interval_s`, a sampler records GPU and CPU use beside it (`scaletrain monitor`);
    `instrumented` runs the script through scaletrain's profiler and step clock, which read
    their settings from `variables`. `output_to_stderr` keeps stdout for the command's JSON
    result."""
    launch = local_launch(
        program,
        as_module=as_module,
        args=tuple(args),
        nproc=nproc,
        name=name,
        runs_dir=runs_dir,
        max_restarts=max_restarts,
        hang_limit_s=hang_limit_s,
    )
    if instrumented:
        launch = dataclasses.replace(
            launch, program=in_job_modules.INSTRUMENT, as_module=True, script_args=(program, *args)
        )
    folder = launch.run_folder
    added = launch_variables(launch, environ, allowed_cpus()) | dict(variables or {})
    processes = "one process per GPU" if nproc == "gpu" else f"{nproc} process(es)"
    console.heading(f"{folder.name}: {processes} of {program} on this machine (torchrun)")
    console.info(f"  folder   {folder.root}/")
    console.info(f"  logs     {folder.logs}/rank-<N>.out|.err (console shows rank 0)")
    for variable, value in added.items():
        console.info(f"  set      {variable}={value}")
    if monitor_interval_s is None:
        return folder, run_local(launch, added, output_to_stderr=output_to_stderr)
    shown = folder.name if folder.root.parent == runs_dir else str(folder.root)
    console.info(f"  monitor  every {monitor_interval_s:g} s: scaletrain monitor {shown}")
    folder.create()
    sampler = start_sampler(folder, monitor_interval_s, environ)
    try:
        return folder, run_local(launch, added, output_to_stderr=output_to_stderr)
    finally:
        stop_sampler(sampler)


def show_other_ranks(folder: RunFolder, *, tracebacks_only: bool) -> None:
    """Rank 0 is on the console already: show the end of the other ranks' error logs of the
    last attempt (earlier attempts were restarted)."""
    for error_log in sorted(folder.last_attempt_logs().glob("rank-*.err")):
        if error_log.name == "rank-0.err":
            continue
        lines = [line for line in error_log.read_text(errors="replace").splitlines() if line]
        if lines and (not tracebacks_only or any("Traceback" in line for line in lines)):
            console.error(f"{error_log} ends with:")
            console.note(Text("\n".join(lines[-_TAIL_LINES:])))
