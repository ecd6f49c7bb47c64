"""`scaletrain scale`: a strong or weak scaling study of your script, locally or on Slurm."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

import typer
from rich.text import Text

from scaletrain.cli.common import (
    JSON_OPTION,
    RUNS_DIR_OPTION,
    process_environ,
    script_arguments,
    show_report,
)
from scaletrain.core import console
from scaletrain.core.errors import ScaletrainError
from scaletrain.core.run_folder import RunFolder, default_run_name
from scaletrain.launch.local_run import start_local
from scaletrain.launch.study_jobs import (
    BILLING_COLUMNS,
    SlurmStudy,
    billing_rows,
    check_budget,
    prepare_study_jobs,
    run_one_after_another,
    study_job_options,
)
from scaletrain.observe.monitor.sampler import DEFAULT_INTERVAL_S
from scaletrain.observe.scaling.report import fit_lines, table_lines, write_report
from scaletrain.observe.scaling.study import (
    Point,
    StudyDesign,
    fitted_study,
    measure,
    parse_sizes,
    save_study,
)


def scale(
    ctx: typer.Context,
    script: Path = typer.Argument(
        ...,
        metavar="SCRIPT [ARGS]...",
        help="Your training script, then its own arguments (after -- if they are named like "
        "scaletrain's options).",
        show_default=False,
    ),
    sizes: str = typer.Option(
        "1,2,4", "--sizes", help="Processes (locally) or nodes (--cluster) to measure."
    ),
    steps: int = typer.Option(20, "--steps", help="Steps timed at each size."),
    warmup: int = typer.Option(5, "--warmup", help="Steps run before timing at each size."),
    weak: bool = typer.Option(
        False, "--weak", help="Weak scaling: the work per process stays (default: strong)."
    ),
    batch: int | None = typer.Option(
        None,
        "--batch",
        help="Strong: the global batch; --weak: the batch per process (per node on Slurm). "
        "Replaces {batch} in the script's arguments; throughput is then in samples/s.",
    ),
    name: str | None = typer.Option(None, "--name", help="Study name (folder under --runs-dir)."),
    runs_dir: Path = RUNS_DIR_OPTION,
    cluster: str | None = typer.Option(
        None, "--cluster", "-c", help="Run each size as a Slurm job on this cluster."
    ),
    time: str = typer.Option("0:30:00", "--time", "-t", help="Slurm: time limit of each job."),
    gpus_per_node: int | None = typer.Option(
        None, "--gpus-per-node", help="Slurm: GPUs on each node (default: all of a node)."
    ),
    partition: str | None = typer.Option(None, "--partition", "-p", help="Slurm partition."),
    account: str | None = typer.Option(
        None, "--account", "-A", envvar=["SCALETRAIN_ACCOUNT", "SBATCH_ACCOUNT"]
    ),
    mode: str = typer.Option("torchrun", "--mode", "-m", help="Slurm launch mode."),
    budget: float | None = typer.Option(
        None, "--budget", help="Slurm: refuse to start if the jobs may bill more than this."
    ),
    no_check: bool = typer.Option(False, "--no-check", help="Slurm: skip the preflight check."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the plan and what it bills only."),
    as_json: bool = JSON_OPTION,
) -> None:
    """Scaling study: SCRIPT at 1, 2, 4, ... processes or nodes; speed-up and a prediction.

    Runs SCRIPT for a fixed number of steps at each size and reports throughput, speed-up,
    efficiency, where the step time goes, and a prediction for larger sizes. Locally the
    sizes are processes; with --cluster they are nodes, one Slurm job each, and the plan
    shows what the study bills before anything is submitted. The report is
    runs/<name>/report/scaling.md with PNG plots.

    Example: [bold]scaletrain scale --sizes 1,2,4 --batch 256 train.py --batch-size {batch}[/bold]
    """
    args = list(script_arguments(ctx, str(script)))
    design = StudyDesign(
        sizes=parse_sizes(sizes), weak=weak, batch=batch, warmup=warmup, timed=steps
    )
    # {batch} without --batch fails here, before any run.
    args_by_size = {size: design.script_args(args, size) for size in design.sizes}
    study_name = name or f"scale-{default_run_name(str(script), datetime.now())}"
    folder = RunFolder(runs_dir / study_name)
    kind = "weak" if weak else "strong"
    if cluster is None:
        console.heading(f"{study_name}: {kind} scaling of {script} at {sizes} local processes")
        points = [
            _run_local(folder, script, sized, size, design, as_json)
            for size, sized in args_by_size.items()
        ]
        unit, per_unit = "process", 1
    else:
        slurm_study = SlurmStudy(
            cluster=cluster, time=time, gpus_per_node=gpus_per_node, partition=partition,
            account=account, mode=mode, budget=budget, preflight=not no_check,
        )  # fmt: skip
        console.heading(f"{study_name}: {kind} scaling of {script} on {sizes} node(s) of {cluster}")
        found = _run_on_slurm(slurm_study, folder, script, args_by_size, design, dry_run=dry_run)
        if found is None:
            return
        points, per_unit = found
        unit = "node"
    study = fitted_study(design, unit, per_unit, points)
    save_study(study, folder.report / "scaling.json")
    if as_json:
        show_report(folder.report / "scaling.json")
    else:
        console.show(Text("\n".join([*table_lines(study), "", *fit_lines(study)])))
    report = write_report(study, f"{script.name} ({study_name})", folder.report)
    console.info(f"report   {report} (with PNG plots beside it)")


# Locally each process stands in for one GPU: one core each (as in the test cluster's
# profile), so that sizes differ in the number of processes only, not in threads per process.
_THREADS_PER_PROCESS = {"OMP_NUM_THREADS": "1"}


def _run_local(
    study: RunFolder,
    script: Path,
    args: tuple[str, ...],
    size: int,
    design: StudyDesign,
    output_to_stderr: bool,
) -> Point:
    folder, result = start_local(
        str(script),
        args=args,
        nproc=str(size),
        name=f"n{size}",
        runs_dir=study.root / "sizes",
        environ=process_environ(),
        monitor_interval_s=DEFAULT_INTERVAL_S,
        variables=_THREADS_PER_PROCESS | design.variables(),
        instrumented=True,
        output_to_stderr=output_to_stderr,
    )
    if result.exit_code != 0:
        raise ScaletrainError(
            f"The run with {size} process(es) failed (exit code {result.exit_code}).",
            f"see its logs in {folder.logs}/; the study stops at the first failed size.",
        )
    return measure(folder, size, design)


def _run_on_slurm(
    study: SlurmStudy,
    folder: RunFolder,
    script: Path,
    args_by_size: dict[int, tuple[str, ...]],
    design: StudyDesign,
    *,
    dry_run: bool,
) -> tuple[list[Point], int] | None:
    """Plan, show the billing, then submit and wait for each size; the points and the
    processes per node (None for --dry-run)."""
    environ = process_environ()
    options = study_job_options(
        preflight=study.preflight, monitor_interval_s=DEFAULT_INTERVAL_S,
        instrument=design.variables(), environ=environ,
    )  # fmt: skip
    prepared = prepare_study_jobs(study, folder, script, args_by_size, options, environ)
    plans = {size: job.plan for size, job in prepared.items()}
    rows = billing_rows(plans)
    console.show(console.table(rows, title="what the study may bill", columns=BILLING_COLUMNS))
    console.info("  jobs run one after another and end after the study's steps, usually well "
                 "before their time limit")  # fmt: skip
    check_budget(plans, study.budget)
    if dry_run:
        return None
    runs = run_one_after_another(prepared, folder, environ)
    points = [measure(run, size, design) for size, run in zip(design.sizes, runs, strict=True)]
    return points, next(iter(plans.values())).gpus_per_node
