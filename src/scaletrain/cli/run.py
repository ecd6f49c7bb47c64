"""`scaletrain run`: run a training script as N local processes, recorded in a run folder."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import typer

from scaletrain.checkpoint.layout import CheckpointStore
from scaletrain.cli.common import (
    HANG_LIMIT_OPTION,
    JSON_OPTION,
    MONITOR_INTERVAL_OPTION,
    PROFILE_OPTION,
    RUN_NAME_OPTION,
    RUNS_DIR_OPTION,
    SCRIPT_ARGUMENT,
    process_environ,
    script_arguments,
    summary_value,
)
from scaletrain.core import console
from scaletrain.core.errors import ScaletrainError
from scaletrain.core.files import read_text
from scaletrain.core.hang_report import parse_hang_limit
from scaletrain.core.run_folder import RunFolder
from scaletrain.core.variables import PROFILE
from scaletrain.launch.local_run import LocalRunResult, show_other_ranks, start_local
from scaletrain.launch.script_decisions import recovery
from scaletrain.observe.profile.spec import parse_profile
from scaletrain.planning.script_facts import read_script_facts


def run(
    ctx: typer.Context,
    script: str = SCRIPT_ARGUMENT,
    nproc: str = typer.Option(
        "1",
        "--nproc",
        "-n",
        envvar="SCALETRAIN_NPROC",
        help="Processes to start: a number, or 'gpu' for one per visible GPU.",
    ),
    name: str | None = RUN_NAME_OPTION,
    runs_dir: Path = RUNS_DIR_OPTION,
    max_restarts: int | None = typer.Option(
        None,
        "--max-restarts",
        envvar="SCALETRAIN_MAX_RESTARTS",
        help=(
            "Restart all processes up to this many times if one fails; they resume from the "
            "newest checkpoint. Default: 3 for a script that resumes (st.Checkpointer, ...), "
            "else 0: a restart would train from the start again."
        ),
    ),
    monitor_interval: float = MONITOR_INTERVAL_OPTION,
    profile: str | None = PROFILE_OPTION,
    as_json: bool = JSON_OPTION,
    hang_limit: str = HANG_LIMIT_OPTION,
) -> None:
    """Run a training script as N processes on this machine.

    Starts SCRIPT with torch.distributed.run and records the run in runs/<name>/: per-rank
    logs, metrics and a summary. The arguments after SCRIPT are passed to it unchanged; put
    scaletrain's own options before SCRIPT. Rank 0's output and then the summary go to
    stdout; with --json the summary alone (rank 0's output then goes to stderr).

    Example: [bold]scaletrain run --nproc 2 examples/mnist/train.py --epochs 3[/bold]
    """
    restarts = recovery(
        read_script_facts(Path(script)), max_restarts=max_restarts, requeue=None
    ).max_restarts
    args = script_arguments(ctx, script)
    started = time.time()
    spec = parse_profile(profile) if profile else None
    folder, result = start_local(
        script,
        args=args,
        nproc=nproc,
        name=name,
        runs_dir=runs_dir,
        environ=process_environ(),
        max_restarts=restarts,
        monitor_interval_s=monitor_interval or None,
        instrumented=spec is not None,
        variables={PROFILE: spec.to_text()} if spec else None,
        output_to_stderr=as_json,
        hang_limit_s=parse_hang_limit(hang_limit),
    )
    stopped = _since(folder.stopped_marker, started)
    summary = _read_json(folder.metrics / "summary.json")
    fields: dict[str, Any] = {
        "run": folder.name,
        "status": _status(result, stopped)[0],
        "exit_code": result.exit_code,
        "duration_s": round(result.duration_s, 3),
        "summary": summary,
        "summary_is_new": _since(folder.metrics / "summary.json", started) is not None,
        "checkpoint": _latest_checkpoint(folder),
        "stacks": f"{folder.root / result.hang.stacks}/" if result.hang else None,
        "folder": str(folder.root),
    }
    if as_json:
        console.show_json(fields)
    else:
        _show_end(fields, result, stopped)
    if result.exit_code != 0 and stopped is None and result.hang is None:
        show_other_ranks(folder, tracebacks_only=True)
    # A clean stop resumes with the same command: not a failure, even when torchrun itself
    # got the SIGTERM (it then exits non-zero after its processes saved and exited 0).
    raise typer.Exit(0 if stopped else result.exit_code)


def _since(path: Path, started: float) -> dict[str, Any] | None:
    """What a JSON file of the run says, if this launch (not an earlier one) wrote it."""
    if path.is_file() and path.stat().st_mtime >= started:
        return _read_json(path)
    return None


def _read_json(path: Path) -> dict[str, Any] | None:
    """A JSON object the run wrote; None when missing or unreadable (never an error here:
    the run itself is over, and its result must still be shown)."""
    if not path.is_file():
        return None
    try:
        data = json.loads(read_text(path, "run file"))
    except (ScaletrainError, json.JSONDecodeError):
        console.warning(f"{path} is not readable JSON; left as it is.")
        return None
    return data if isinstance(data, dict) else None


def _latest_checkpoint(folder: RunFolder) -> str | None:
    latest = CheckpointStore(folder.checkpoints).latest()
    return f"{latest}/" if latest is not None else None


def _show_end(
    fields: dict[str, Any], result: LocalRunResult, stopped: dict[str, Any] | None
) -> None:
    rows: list[tuple[str, console.Piece]] = [
        ("status", _status(result, stopped)),
        ("duration", f"{result.duration_s:.1f} s"),
    ]
    summary = fields["summary"] or {}
    if summary and not fields["summary_is_new"]:
        rows.append(("summary", ("from an earlier launch (this one trained no step)", "muted")))
    for key, value in summary.items():
        rows.append((str(key), summary_value(value)))
    if fields["checkpoint"]:
        rows.append(("checkpoint", fields["checkpoint"]))
    if fields["stacks"]:
        rows.append(("stacks", fields["stacks"]))
    rows.append(("folder", f"{fields['folder']}/"))
    console.show(console.table(rows, title=f"run {fields['run']}"))


def _status(result: LocalRunResult, stopped: dict[str, Any] | None) -> tuple[str, str]:
    if result.hang is not None:
        return (
            f"hung: no step for {result.hang.stalled_s:.0f} s after step {result.hang.step}; "
            f"the watchdog ended it (exit code {result.exit_code}). {result.hang.summary}",
            "error",
        )
    if stopped is not None:
        return (
            f"stopped at step {stopped.get('step', '?')} ({stopped.get('reason', '?')}); "
            "run the same command to resume",
            "warning",
        )
    if result.exit_code != 0:
        return f"failed (exit code {result.exit_code})", "error"
    return "finished", "success"
