"""`scaletrain monitor`: GPU and CPU use on every node of a run, live or afterwards."""

from __future__ import annotations

import time
from dataclasses import asdict
from pathlib import Path

import typer
from rich.console import Group
from rich.live import Live
from rich.table import Table
from rich.text import Text

from scaletrain.cli.common import JSON_OPTION, RUN_ARGUMENT, RUNS_DIR_OPTION
from scaletrain.core import console
from scaletrain.core.errors import ScaletrainError
from scaletrain.core.plotting import plots_available
from scaletrain.core.run_folder import RunFolder, find_run
from scaletrain.core.run_record import read_run_record
from scaletrain.observe.monitor.plots import plot_monitor
from scaletrain.observe.monitor.samples import Sample, read_run_samples
from scaletrain.observe.monitor.usage import Finding, Usage, find_problems, summarize, window

# The live view judges the last this many seconds: long enough to smooth one slow step.
_LIVE_WINDOW_S = 30.0
# A run whose newest sample is older than this many sample intervals has ended.
_STALE_INTERVALS = 4
_GB = 1e9


def monitor(
    name: str | None = RUN_ARGUMENT,
    runs_dir: Path = RUNS_DIR_OPTION,
    once: bool = typer.Option(
        False, "--once", help="Print the current state once instead of following the run."
    ),
    refresh: float = typer.Option(2.0, "--refresh", help="Seconds between screen updates."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Show GPU, CPU and memory use of every node and rank of a run, live or afterwards.

    While the run is going, a table follows it and flags idle GPUs, ranks that do unequal
    work and memory near the limit; when it has ended, a summary of the whole run and PNG
    plots in runs/<name>/report/.

    Example: [bold]scaletrain monitor mnist[/bold]
    """
    folder = find_run(runs_dir, name)
    samples = _samples(folder)
    if as_json:  # what the view shows, once: the recent window while live, else the whole run
        running = _is_live(folder, samples)
        shown = {h: window(s, _LIVE_WINDOW_S) for h, s in samples.items()} if running else samples
        usage = summarize(shown)
        findings = [finding.message for finding in find_problems(usage)]
        console.show_json(
            {"run": folder.name, "live": running, **asdict(usage), "findings": findings}
        )
        return
    if _is_live(folder, samples):
        if once:
            console.show(_live_view(folder, samples))
            return
        try:
            with Live(_live_view(folder, samples), console=console.results()) as live:
                while _is_live(folder, samples):
                    time.sleep(refresh)
                    samples = _samples(folder)
                    live.update(_live_view(folder, samples), refresh=True)
        except KeyboardInterrupt:
            return  # the user leaves the view; the run goes on
    _show_summary(folder, samples)


def _samples(folder: RunFolder) -> dict[str, list[Sample]]:
    samples = read_run_samples(folder.metrics)
    if not samples:
        raise ScaletrainError(
            f"Run {folder.name} has no monitor samples in {folder.metrics}/.",
            "runs started by `scaletrain run` or `scaletrain submit` are sampled unless "
            "--no-monitor was given; a job that has not started yet has none either.",
        )
    return samples


def _interval(samples: list[Sample]) -> float:
    if len(samples) < 2:
        return 2.0
    return (samples[-1].time - samples[0].time) / (len(samples) - 1)


def _is_live(folder: RunFolder, samples: dict[str, list[Sample]]) -> bool:
    """New samples are still coming: the newest is younger than a few intervals."""
    newest = max(node[-1].time for node in samples.values())
    interval = max(_interval(node) for node in samples.values())
    # A local run's record gets "finished" when torchrun has ended (Slurm jobs have none).
    record = read_run_record(folder)
    ended = record is not None and record.finished is not None
    return not ended and time.time() - newest < max(_STALE_INTERVALS * interval, 10.0)


def _memory(used: int | None, total: int | None) -> str:
    if used is None:
        return "-"
    return f"{used / _GB:.1f}/{total / _GB:.0f} GB" if total else f"{used / _GB:.1f} GB"


def _percent(value: float | None) -> str:
    return "-" if value is None else f"{value:.0f}%"


def _usage_table(usage: Usage, title: str) -> Table:
    table = Table(title=title, title_justify="left")
    for column in ("node", "what", "busy", "memory", "power"):
        table.add_column(column, justify="left" if column in ("node", "what") else "right")
    for node in usage.nodes:
        table.add_row(
            node.host,
            "CPU (all cores)",
            _percent(node.mean_cpu_percent),
            _memory(node.peak_memory_bytes, node.memory_total_bytes),
            "",
        )
        for gpu in (gpu for gpu in usage.gpus if gpu.host == node.host):
            ranks = ", ".join(str(rank) for rank in gpu.ranks)
            table.add_row(
                "",
                f"GPU {gpu.index} {gpu.name}" + (f" (rank {ranks})" if ranks else ""),
                _percent(gpu.mean_utilization),
                _memory(gpu.peak_memory_bytes, gpu.memory_total_bytes),
                "-" if gpu.mean_power_watts is None else f"{gpu.mean_power_watts:.0f} W",
            )
        for rank in (rank for rank in usage.ranks if rank.host == node.host):
            table.add_row(
                "",
                f"rank {rank.rank} (CPU, with its workers)",
                _percent(rank.mean_cpu_percent),
                _memory(rank.peak_rss_bytes, None),
                "",
            )
    return table


def _findings_text(findings: list[Finding]) -> Text:
    if not findings:
        return Text("no idle GPUs, no imbalance between ranks, memory below 90%", style="success")
    return Text("\n".join(f"! {finding.message}" for finding in findings), style="warning")


def _live_view(folder: RunFolder, samples: dict[str, list[Sample]]) -> Group:
    recent = {host: window(node, _LIVE_WINDOW_S) for host, node in samples.items()}
    usage = summarize(recent)
    nodes, ranks = len(usage.nodes), len(usage.ranks)
    title = (
        f"{folder.name}: {nodes} node(s), {ranks} rank(s), live "
        f"(means over the last {_LIVE_WINDOW_S:.0f} s; Ctrl-C to leave, the run goes on)"
    )
    return Group(_usage_table(usage, title), _findings_text(find_problems(usage)))


def _show_summary(folder: RunFolder, samples: dict[str, list[Sample]]) -> None:
    usage = summarize(samples)
    duration = max(n.last for n in usage.nodes) - min(n.first for n in usage.nodes)
    title = (
        f"{folder.name}: {len(usage.nodes)} node(s), {len(usage.ranks)} rank(s), "
        f"{duration:.0f} s sampled (means; memory: peaks)"
    )
    console.show(_usage_table(usage, title))
    console.show(_findings_text(find_problems(usage)))
    if plots_available():
        path = plot_monitor(samples, folder.report / "monitor.png")
        console.info(f"plot     {path}")
    else:
        console.info("plots    pip install 'scaletrain[plots]' for PNG plots")
    tensorboard = folder.metrics / "tensorboard"
    if tensorboard.is_dir():
        console.info(f"tensorboard --logdir {tensorboard}")
