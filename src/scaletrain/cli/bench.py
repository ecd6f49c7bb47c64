"""`scaletrain bench`: collective bandwidth on N local processes, as a job would measure it."""

from __future__ import annotations

from pathlib import Path

import typer

from scaletrain.cli.common import (
    DIAGNOSE_NPROC_OPTION,
    JSON_OPTION,
    RUNS_DIR_OPTION,
    process_environ,
    show_report,
)
from scaletrain.core import console
from scaletrain.diagnose.bench.bandwidth import parse_ops, parse_size
from scaletrain.diagnose.bench.report import BENCH_JSON
from scaletrain.launch.local_run import show_other_ranks, start_local


def bench(
    nproc: str = DIAGNOSE_NPROC_OPTION,
    ops: str = typer.Option(
        "all_reduce,all_gather,reduce_scatter,broadcast", "--ops", help="Collectives to measure."
    ),
    sizes: str = typer.Option("", "--sizes", help="Message sizes in bytes, e.g. 8,64K,16M."),
    max_size: str = typer.Option(
        "", "--max-size", help="Largest size of the default ×4 sweep from 8 B (GPU 256M, CPU 32M)."
    ),
    warmup: int = typer.Option(5, "--warmup", help="Untimed calls per size."),
    iterations: int = typer.Option(20, "--iterations", help="Timed calls per size."),
    pairs: bool = typer.Option(
        False, "--pairs", help="Measure pairs of nodes (one process each) to find a slow one."
    ),
    name: str | None = typer.Option(None, "--name", help="Run name. Default: bench-<time>."),
    runs_dir: Path = RUNS_DIR_OPTION,
    as_json: bool = JSON_OPTION,
) -> None:
    """Measure all_reduce, all_gather, reduce_scatter and broadcast bandwidth.

    Prints time, algorithm and bus bandwidth per message size (nccl-tests' definitions)
    and saves report/bench.json and report/bench.png in the run folder. In a job:
    python -m scaletrain.diagnose.bench under srun or torchrun.

    Example: [bold]scaletrain bench --nproc 2 --max-size 16M[/bold]
    """
    parse_ops(ops)  # bad values fail here, once, not in every process
    for size in [*sizes.split(","), max_size]:
        if size:
            parse_size(size)
    args = ["--ops", ops, "--warmup", str(warmup), "--iterations", str(iterations)]
    args += ["--sizes", sizes] if sizes else []
    args += ["--max-size", max_size] if max_size else []
    args += ["--pairs"] if pairs else []
    folder, result = start_local(
        "scaletrain.diagnose.bench",
        as_module=True,
        args=args,
        nproc=nproc,
        name=name,
        runs_dir=runs_dir,
        environ=process_environ(),
        output_to_stderr=as_json,
    )
    if result.exit_code != 0:
        show_other_ranks(folder, tracebacks_only=False)
    else:
        if as_json:
            show_report(folder.report / BENCH_JSON)
        console.success(f"results in {folder.report / BENCH_JSON}")
    raise typer.Exit(result.exit_code)
