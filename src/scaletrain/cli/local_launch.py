"""Start a script or module as N local processes with torchrun, recorded in a run folder.

One path for `scaletrain run` (your script), `check` and `bench` (scaletrain's in-job entry
points, started as modules so that the worker's sys.path stays the user's).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path

from rich.markup import escape

from scaletrain.cli import console
from scaletrain.cli.common import process_environ
from scaletrain.launch.local import (
    LocalLaunch,
    LocalRunResult,
    check_launchable,
    launch_variables,
    run_local,
)
from scaletrain.run_folder import RunFolder, default_run_name
from scaletrain.runtime.cpus import allowed_cpus

# Lines of another rank's error log worth showing: the end of its traceback.
_TAIL_LINES = 15


def start_local(
    program: str,
    *,
    as_module: bool = False,
    args: Sequence[str],
    nproc: str,
    name: str | None,
    runs_dir: Path,
    max_restarts: int = 0,
    variables: Mapping[str, str] | None = None,
) -> tuple[RunFolder, LocalRunResult]:
    """Check, announce and run a local launch; return its run folder and result."""
    stem = program.rsplit(".", 1)[-1] if as_module else Path(program).stem
    folder = RunFolder(runs_dir / (name or default_run_name(Path(stem), datetime.now())))
    launch = LocalLaunch(
        program=program,
        as_module=as_module,
        script_args=tuple(args),
        nproc=nproc,
        run_folder=folder,
        max_restarts=max_restarts,
    )
    check_launchable(launch)
    added = launch_variables(launch, process_environ(), allowed_cpus()) | dict(variables or {})
    processes = "one process per GPU" if nproc == "gpu" else f"{nproc} process(es)"
    console.heading(f"{folder.name}: {processes} of {program} on this machine (torchrun)")
    console.info(f"  folder   {folder.root}/")
    console.info(f"  logs     {folder.logs}/rank-<N>.out|.err (console shows rank 0)")
    for variable, value in added.items():
        # escape: values such as TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE=[rank${rank}] are not markup
        console.info(escape(f"  set      {variable}={value}"))
    return folder, run_local(launch, added)


def show_other_ranks(folder: RunFolder, *, tracebacks_only: bool) -> None:
    """Rank 0 is on the console already: show the end of the other ranks' error logs of the
    last attempt (earlier attempts were restarted)."""
    for error_log in sorted(folder.last_attempt_logs().glob("rank-*.err")):
        if error_log.name == "rank-0.err":
            continue
        lines = [line for line in error_log.read_text(errors="replace").splitlines() if line]
        if lines and (not tracebacks_only or any("Traceback" in line for line in lines)):
            console.error(f"{error_log} ends with:")
            console.console.print("\n".join(lines[-_TAIL_LINES:]), markup=False)
