"""`scaletrain doctor`: known failure signatures in a job's logs, with cause and fix."""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.markup import escape
from rich.table import Table

from scaletrain.core import console
from scaletrain.core.errors import ScaletrainError
from scaletrain.core.run_folder import RunFolder
from scaletrain.launch.local_run import SEPARATOR

# Files in a run folder that hold output: Slurm's and per-rank logs, NCCL's debug files.
_LOG_SUFFIXES = {".out", ".err", ".log", ".txt"}
_EXCERPT_CHARACTERS = 200


def _run_files(folder: RunFolder) -> list[Path]:
    """The logs of a run, plus the training script that run.json names (for script checks)."""
    files = [p for p in sorted(folder.logs.rglob("*")) if p.is_file() and p.suffix in _LOG_SUFFIXES]
    if folder.run_record.is_file():
        command = json.loads(folder.run_record.read_text()).get("command", [])
        if SEPARATOR in command and command.index(SEPARATOR) + 1 < len(command):
            script = Path(command[command.index(SEPARATOR) + 1])
            if script.suffix == ".py" and script.is_file():
                files.append(script)
    return files


def _files(targets: list[Path]) -> list[Path]:
    files: list[Path] = []
    for target in targets:
        if target.is_dir():
            files += _run_files(RunFolder(target))
        elif target.is_file():
            files.append(target)
        else:
            raise ScaletrainError(
                f"{str(target)!r} is neither a log file nor a run folder.",
                "give a job's log (e.g. runs/<name>/logs/<job>.out) or a run folder (runs/<name>).",
            )
    return files


def doctor(
    targets: list[Path] = typer.Argument(
        ..., help="Log files, training scripts (.py) or run folders (runs/<name>)."
    ),
) -> None:
    """Explain a failed job: match its logs against known failure signatures.

    Prints each known problem found (NCCL/RCCL timeouts, wrong MASTER_ADDR, port in use,
    missing network plugin, out of memory per rank, srun not used, ...) with its usual cause
    and the fix. Exit code 1 when something was found, 0 when nothing matched.

    Example: [bold]scaletrain doctor runs/mnist-20250101-120000[/bold]
    """
    from scaletrain.diagnose.doctor import diagnose_files

    files = _files(targets)
    findings = diagnose_files(files)
    if not findings:
        console.success(
            f"no known failure signature in {len(files)} file(s); "
            "if the job failed, the end of its logs shows the error"
        )
        raise typer.Exit(0)
    for finding in findings:
        signature, first = finding.signature, finding.first
        ranks = f" on rank(s) {', '.join(map(str, sorted(finding.ranks)))}" if finding.ranks else ""
        console.console.print(
            f"[error]{signature.id}[/error]: {escape(signature.title)} "
            f"({finding.count} line(s){ranks})",
            soft_wrap=True,
        )
        excerpt = first.line.strip()[:_EXCERPT_CHARACTERS]
        console.console.print(
            f"  [muted]{escape(first.path)}:{first.line_number}:[/muted] {escape(excerpt)}",
            soft_wrap=True,
        )
        console.console.print(
            f"  [heading]cause:[/heading] {escape(signature.cause)}", soft_wrap=True
        )
        console.console.print(f"  [warning]fix:[/warning] {escape(signature.fix)}", soft_wrap=True)
        if finding.details:
            _show_details(finding.details)
    raise typer.Exit(1)


def _show_details(details: list[dict[str, str]]) -> None:
    """Values from the matched lines per rank, e.g. sizes of an out-of-memory error."""
    columns = list(dict.fromkeys(key for detail in details for key in detail))
    table = Table(show_edge=False, pad_edge=False, box=None)
    for column in columns:
        table.add_column(column, style="muted" if column == "rank" else None)
    for detail in details:
        table.add_row(*(detail.get(column, "") for column in columns))
    console.console.print(table)
