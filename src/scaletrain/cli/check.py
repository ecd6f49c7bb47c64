"""`scaletrain check`: the preflight checks on N local processes, as a job would run them."""

from __future__ import annotations

from pathlib import Path

import typer

from scaletrain.cli import console
from scaletrain.cli.local_diagnostics import module_file, run_diagnostic, show_other_ranks
from scaletrain.diagnose import inputs as spec
from scaletrain.diagnose.report import PREFLIGHT_JSON


def check(
    nproc: str = typer.Option(
        "2", "--nproc", "-n", envvar="SCALETRAIN_NPROC", help="Processes to start (or 'gpu')."
    ),
    expected_cpu_masks: str = typer.Option(
        "",
        spec.EXPECTED_CPU_MASKS.option,
        envvar=spec.EXPECTED_CPU_MASKS.variable,
        help=spec.EXPECTED_CPU_MASKS.help,
    ),
    expected_gpus_per_node: str = typer.Option(
        "",
        spec.EXPECTED_GPUS_PER_NODE.option,
        envvar=spec.EXPECTED_GPUS_PER_NODE.variable,
        help=spec.EXPECTED_GPUS_PER_NODE.help,
    ),
    dataloader_workers: str = typer.Option(
        "",
        spec.DATALOADER_WORKERS.option,
        envvar=spec.DATALOADER_WORKERS.variable,
        help=spec.DATALOADER_WORKERS.help,
    ),
    min_free_gb: str = typer.Option(
        "",
        spec.MIN_FREE_GB.option,
        envvar=spec.MIN_FREE_GB.variable,
        help=spec.MIN_FREE_GB.help,
    ),
    rendezvous_timeout: str = typer.Option(
        "",
        spec.RENDEZVOUS_TIMEOUT.option,
        envvar=spec.RENDEZVOUS_TIMEOUT.variable,
        help=spec.RENDEZVOUS_TIMEOUT.help,
    ),
    expect_net_plugin: str = typer.Option(
        "",
        spec.EXPECT_NET_PLUGIN.option,
        envvar=spec.EXPECT_NET_PLUGIN.variable,
        help=spec.EXPECT_NET_PLUGIN.help,
    ),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show every check of every rank."),
    name: str | None = typer.Option(None, "--name", help="Run name. Default: preflight-<time>."),
    runs_dir: Path = typer.Option(
        Path("runs"), "--runs-dir", envvar="SCALETRAIN_RUNS_DIR", help="Where run folders live."
    ),
) -> None:
    """Check launcher, devices, CPU affinity, threads, network and run folder on N processes.

    The same checks run on every rank as the first step of a generated job
    (python -m scaletrain.diagnose.preflight). Exit code 1 when a check fails.

    Example: [bold]scaletrain check --nproc 2[/bold]
    """
    given = {
        spec.EXPECTED_CPU_MASKS.variable: expected_cpu_masks,
        spec.EXPECTED_GPUS_PER_NODE.variable: expected_gpus_per_node,
        spec.DATALOADER_WORKERS.variable: dataloader_workers,
        spec.MIN_FREE_GB.variable: min_free_gb,
        spec.RENDEZVOUS_TIMEOUT.variable: rendezvous_timeout,
        spec.EXPECT_NET_PLUGIN.variable: expect_net_plugin,
    }
    variables = {variable: value for variable, value in given.items() if value}
    spec.read_inputs(variables)  # bad values fail here, once, not in every process
    folder, exit_code = run_diagnostic(
        module_file("scaletrain.diagnose.preflight"),
        args=["--verbose"] if verbose else [],
        nproc=nproc,
        name=name,
        runs_dir=runs_dir,
        variables=variables,
    )
    if not (folder.report / PREFLIGHT_JSON).is_file():
        show_other_ranks(folder)
    if exit_code == 0:
        console.success(f"results in {folder.report / PREFLIGHT_JSON}")
    raise typer.Exit(exit_code)
