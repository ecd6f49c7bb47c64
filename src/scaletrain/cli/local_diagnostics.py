"""Run one of the in-job diagnostics (preflight, bench) as N local processes with torchrun,
recorded in a run folder like `scaletrain run`. Shared by `scaletrain check` and `bench`."""

from __future__ import annotations

import importlib.util
import os
from datetime import datetime
from pathlib import Path

from rich.markup import escape

from scaletrain.cli import console
from scaletrain.launch.local import LocalLaunch, check_launchable, launch_variables, run_local
from scaletrain.run_folder import RunFolder, default_run_name
from scaletrain.runtime.cpus import allowed_cpus

# Lines of another rank's output worth showing when the group never formed.
_TAIL_LINES = 12


def module_file(module: str) -> str:
    """The file of an in-job entry point, found without importing it (no torch here)."""
    found = importlib.util.find_spec(module)
    assert found is not None and found.origin is not None, module
    return found.origin


def run_diagnostic(
    module_file: str,
    *,
    args: list[str],
    nproc: str,
    name: str | None,
    runs_dir: Path,
    variables: dict[str, str],
) -> tuple[RunFolder, int]:
    """Start `module_file` on `nproc` local processes; returns the run folder and exit code."""
    script = Path(module_file)
    folder = RunFolder(runs_dir / (name or default_run_name(script, datetime.now())))
    launch = LocalLaunch(script=script, script_args=tuple(args), nproc=nproc, run_folder=folder)
    check_launchable(launch)
    added = launch_variables(launch, dict(os.environ), allowed_cpus()) | variables
    console.heading(f"{script.stem} {folder.name}: {nproc} local process(es) (torchrun)")
    for variable, value in added.items():
        console.info(escape(f"  set      {variable}={value}"))
    result = run_local(launch, added)
    return folder, result.exit_code


def show_other_ranks(folder: RunFolder) -> None:
    """Rank 0 is on the console; show what the other ranks said (their own failures)."""
    for log in sorted(folder.logs.rglob("rank-*.err")):
        if log.name == "rank-0.err":
            continue
        lines = [line for line in log.read_text(errors="replace").splitlines() if line.strip()]
        if lines:
            console.console.print(f"[muted]{log}:[/muted]")
            console.console.print("\n".join(lines[-_TAIL_LINES:]), markup=False)
