"""`scaletrain analyze`: where the time of each rank went, from its profiler trace."""

from __future__ import annotations

from pathlib import Path

import typer

from scaletrain.cli.common import JSON_OPTION, RUN_ARGUMENT, RUNS_DIR_OPTION, show_report
from scaletrain.core import console
from scaletrain.core.run_folder import find_run
from scaletrain.observe.analysis.analyze import analyze_traces
from scaletrain.observe.analysis.report import format_report, write_report


def analyze(
    name: str | None = RUN_ARGUMENT,
    runs_dir: Path = RUNS_DIR_OPTION,
    traces: Path | None = typer.Option(
        None, "--traces", help="A folder of rank traces to analyse instead of a run's traces/."
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Where each rank's profiled steps went: compute, communication, data, idle; stragglers.

    Compute, communication (overlapped with compute or not), data loading and idle time per
    rank, the top kernels or operators, stragglers and load imbalance. Reads
    runs/<name>/traces/ (written by --profile or st.profile) and writes
    runs/<name>/report/analysis.txt, analysis.json and PNG plots.

    Example: [bold]scaletrain analyze mnist[/bold]
    """
    if traces is not None:
        folder, report = traces, traces / "report"
    else:
        run = find_run(runs_dir, name)
        folder, report = run.traces, run.report
    analysis = analyze_traces(folder)
    written = write_report(analysis, report)
    if as_json:
        show_report(report / "analysis.json")
    else:
        console.show_text(format_report(analysis))
    for path in written:
        console.info(f"wrote    {path}")
