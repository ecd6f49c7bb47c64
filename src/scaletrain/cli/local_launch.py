"""Announce and start a local launch (`run`, `check`, `bench`), and show other ranks' errors.

One path for `scaletrain run` (your script), `check` and `bench` (scaletrain's in-job entry
points, started as modules so that the worker's sys.path stays the user's).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from pathlib import Path

from rich.text import Text

from scaletrain.cli.common import process_environ
from scaletrain.core import console, in_job_modules
from scaletrain.core.run_folder import RunFolder
from scaletrain.launch.local_run import LocalRunResult, launch_variables, local_launch, run_local
from scaletrain.observe.monitor.sampler_process import start_sampler, stop_sampler
from scaletrain.runtime.layout import allowed_cpus

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
    added = launch_variables(launch, process_environ(), allowed_cpus()) | dict(variables or {})
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
    sampler = start_sampler(folder, monitor_interval_s, process_environ())
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
