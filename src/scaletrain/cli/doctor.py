"""`scaletrain doctor`: known failure signatures in a job's logs, with cause and fix."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from scaletrain.cli.common import JSON_OPTION
from scaletrain.core import console
from scaletrain.core.errors import ScaletrainError
from scaletrain.core.run_folder import RunFolder
from scaletrain.core.run_record import read_run_record

if TYPE_CHECKING:
    from scaletrain.diagnose.doctor import Finding

# Files in a run folder that hold output: Slurm's and per-rank logs, NCCL's debug files.
_LOG_SUFFIXES = {".out", ".err", ".log", ".txt"}
_EXCERPT_CHARACTERS = 200


def _run_files(folder: RunFolder) -> list[Path]:
    """The logs of a run and of its rehearsal (`submit --rehearse`), plus the training script
    that run.json names (for script checks)."""
    files = [
        path
        for logs in (folder.logs, folder.rehearsal.logs)
        for path in sorted(logs.rglob("*"))
        if path.is_file() and path.suffix in _LOG_SUFFIXES
    ]
    try:
        record = read_run_record(folder)
    except ScaletrainError as problem:  # a damaged record must not keep the logs from a look
        console.warning(f"{problem.problem} Its training script is not checked.")
        record = None
    if record is not None and record.program:
        script = Path(record.program[0])
        if script.suffix == ".py" and script.is_file():
            files.append(script)
    return files


def _files(targets: list[Path]) -> list[Path]:
    files: list[Path] = []
    for target in targets:
        if target.is_dir():
            found = _run_files(RunFolder(target))
            # Heartbeats alone can show a run that went silent (read in `doctor`).
            if not found and not any(RunFolder(target).ranks.glob("rank-*.json")):
                raise ScaletrainError(
                    f"{str(target)!r} holds no logs: no logs/*.out, *.err, *.log or *.txt.",
                    "give a run folder (runs/<name>) after its job ran, or a log file itself.",
                )
            files += found
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
        ...,
        metavar="PATH...",
        help="Log files, training scripts (.py) or run folders (runs/<name>).",
        show_default=False,
    ),
    as_json: bool = JSON_OPTION,
) -> None:
    """Explain a failed job: match its logs against known failure signatures.

    Prints each known problem found (NCCL/RCCL timeouts, wrong MASTER_ADDR, port in use,
    missing network plugin, out of memory per rank, srun not used, node failures, hangs the
    watchdog ended, long silences, ...) with its usual cause and the fix; a log that matches
    none of them but holds a Python traceback shows its last error and where it was raised.
    Exit code 1 when something was found, 0 when nothing was.

    Example: [bold]scaletrain doctor runs/mnist-20250101-120000[/bold]
    """
    from scaletrain.diagnose.doctor import diagnose_files, heartbeat_facts

    files = _files(targets)
    runs = [RunFolder(target) for target in targets if target.is_dir()]
    facts = {f"{run.ranks}/": heartbeat_facts(run) for run in runs}
    findings = diagnose_files(files, facts)
    if as_json:
        console.show_json([_as_dict(finding) for finding in findings])
    elif findings:
        for finding in findings:
            _show(finding)
    if not findings:
        console.success(
            f"no known failure signature in {len(files)} file(s); "
            "if the job failed, the end of its logs shows the error"
        )
    raise typer.Exit(1 if findings else 0)


def _as_dict(finding: Finding) -> dict[str, Any]:
    signature, first = finding.signature, finding.first
    return {
        "id": signature.id,
        "title": signature.title,
        "count": finding.count,
        "ranks": sorted(finding.ranks),
        "first": {"path": first.path, "line_number": first.line_number, "line": first.line},
        "cause": signature.cause,
        "fix": signature.fix,
        "details": finding.details,
    }


def _show(finding: Finding) -> None:
    signature, first = finding.signature, finding.first
    ranks = f" on rank(s) {', '.join(map(str, sorted(finding.ranks)))}" if finding.ranks else ""
    # A log line may hold terminal escapes and stray control characters: shown, not obeyed.
    excerpt = console.one_line(first.line.strip()[:_EXCERPT_CHARACTERS])
    lines = [
        ((signature.id, "error"), f": {signature.title} ({finding.count} line(s){ranks})"),
        ("  ", (f"{first.path}:{first.line_number}:", "muted"), f" {excerpt}"),
        ("  ", ("cause:", "heading"), f" {signature.cause}"),
        ("  ", ("fix:", "warning"), f" {signature.fix}"),
    ]
    output = console.results()
    for pieces in lines:
        output.print(console.text(*pieces), soft_wrap=True)
    if finding.details:
        _show_details(finding.details)


def _show_details(details: list[dict[str, str]]) -> None:
    """Values from the matched lines per rank, e.g. sizes of an out-of-memory error."""
    columns = list(dict.fromkeys(key for detail in details for key in detail))
    rows = [[detail.get(column, "") for column in columns] for detail in details]
    console.show(console.table(rows, columns=columns, show_edge=False, pad_edge=False, box=None))
