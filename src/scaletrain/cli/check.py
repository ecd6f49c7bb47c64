"""`scaletrain check`: the preflight checks on N local processes, as a job would run them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from scaletrain.cli.common import (
    DIAGNOSE_NPROC_OPTION,
    JSON_OPTION,
    RUNS_DIR_OPTION,
    process_environ,
    show_report,
)
from scaletrain.core import console
from scaletrain.core.variables import Variable
from scaletrain.diagnose.preflight import inputs as spec
from scaletrain.diagnose.preflight.report import PREFLIGHT_JSON
from scaletrain.launch.local_run import show_other_ranks, start_local


def input_option(given: Variable) -> Any:
    """A preflight input as an option: empty means not given (then not checked or defaulted)."""
    assert given.option is not None, f"{given.name} is not a preflight input"
    return typer.Option("", given.option, envvar=given.name, help=given.help)


def check(
    nproc: str = DIAGNOSE_NPROC_OPTION,
    expected_cpu_masks: str = input_option(spec.EXPECTED_CPU_MASKS),
    expected_gpus_per_node: str = input_option(spec.EXPECTED_GPUS_PER_NODE),
    dataloader_workers: str = input_option(spec.DATALOADER_WORKERS),
    min_free_gb: str = input_option(spec.MIN_FREE_GB),
    rendezvous_timeout: str = input_option(spec.RENDEZVOUS_TIMEOUT),
    expect_net_plugin: str = input_option(spec.EXPECT_NET_PLUGIN),
    script_variables: str = input_option(spec.SCRIPT_VARIABLES),
    verbose: bool = typer.Option(False, "--verbose", "-v", help="Show every check of every rank."),
    name: str | None = typer.Option(None, "--name", help="Run name. Default: preflight-<time>."),
    runs_dir: Path = RUNS_DIR_OPTION,
    as_json: bool = JSON_OPTION,
    cluster: str | None = typer.Option(
        None,
        "--cluster",
        "-c",
        help="Instead: check the Python a job on this cluster would run (its modules and "
        "venv, or its container) imports scaletrain, torch and --script's imports.",
    ),
    script: str | None = typer.Option(None, "--script", help="With --cluster: your script."),
    mode: str = typer.Option("torchrun", "--mode", "-m", help="With --cluster: the launch mode."),
    stack: str | None = typer.Option(None, "--stack", help="With --cluster: as for submit."),
    container: str | None = typer.Option(
        None, "--container", help="With --cluster: as for submit."
    ),
    venv: str | None = typer.Option(None, "--venv", help="With --cluster: as for submit."),
) -> None:
    """Check launcher, devices, CPU affinity, threads, network and run folder on N processes.

    The same checks run on every rank as the first step of a generated job
    (python -m scaletrain.diagnose.preflight). Exit code 1 when a check fails.

    With --cluster, on a login node: the job's Python instead (no processes started).

    Example: [bold]scaletrain check --nproc 2[/bold];
    [bold]scaletrain check --cluster puhti --script train.py[/bold]
    """
    if cluster is not None:
        from scaletrain.cli.check_environment import check_job_environment, software_choice

        environ = process_environ()
        choice = software_choice(stack, container, venv, environ)
        code = check_job_environment(
            cluster, script=script, mode=mode, choice=choice, environ=environ
        )
        raise typer.Exit(code)
    given = {
        spec.EXPECTED_CPU_MASKS.name: expected_cpu_masks,
        spec.EXPECTED_GPUS_PER_NODE.name: expected_gpus_per_node,
        spec.DATALOADER_WORKERS.name: dataloader_workers,
        spec.MIN_FREE_GB.name: min_free_gb,
        spec.RENDEZVOUS_TIMEOUT.name: rendezvous_timeout,
        spec.EXPECT_NET_PLUGIN.name: expect_net_plugin,
        spec.SCRIPT_VARIABLES.name: script_variables,
    }
    variables = {variable: value for variable, value in given.items() if value}
    spec.read_inputs(variables)  # bad values fail here, once, not in every process
    folder, result = start_local(
        "scaletrain.diagnose.preflight",
        as_module=True,
        args=["--verbose"] if verbose else [],
        nproc=nproc,
        name=name,
        runs_dir=runs_dir,
        environ=process_environ(),
        variables=variables,
        output_to_stderr=as_json,
    )
    report = folder.report / PREFLIGHT_JSON
    if not report.is_file():
        show_other_ranks(folder, tracebacks_only=False)
    elif as_json:
        show_report(report)
    if result.exit_code == 0:
        console.success(f"results in {report}")
    raise typer.Exit(result.exit_code)
