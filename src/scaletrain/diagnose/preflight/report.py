"""Show preflight results once: a row per node and rank, then each problem with its fix.

No torch: the same rendering serves rank 0 inside a job and the CLI on a login node.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.table import Table

from scaletrain.diagnose.preflight.results import CheckResult, RankReport, compact_list

PREFLIGHT_JSON = "preflight.json"
_MARKS = {
    "ok": "[success]ok[/success]",
    "warn": "[warning]WARN[/warning]",
    "skip": "[muted]skip[/muted]",
}


def _problems(
    reports: Sequence[RankReport], job_results: Sequence[CheckResult]
) -> list[tuple[CheckResult, str]]:
    """Failures and warnings, each once with the ranks it concerns ('job' for job-wide)."""
    grouped: dict[tuple[str, str, str], list[RankReport]] = defaultdict(list)
    for report in reports:
        for result in report.results:
            if result.status in ("fail", "warn"):
                grouped[(result.name, result.status, result.fix)].append(report)
    problems = []
    for (name, _, _), concerned in grouped.items():
        first = next(r for r in concerned[0].results if r.name == name)
        hosts = sorted({report.facts.host for report in concerned})
        ranks = compact_list(report.facts.rank for report in concerned)
        problems.append((first, f"rank {ranks} on {', '.join(hosts)}"))
    problems += [(result, "job") for result in job_results if result.status in ("fail", "warn")]
    return sorted(problems, key=lambda problem: problem[0].status != "fail")


def _mark(result: CheckResult) -> str:
    return "[error]FAIL[/error]" if result.failed else _MARKS[result.status]


def _say(console: Console, markup: str, text: str) -> None:
    """A styled label and plain text (error messages may contain brackets), never wrapped
    mid-word so that log files keep one finding per line."""
    console.print(f"{markup} {escape(text)}", soft_wrap=True)


def _rank_status(report: RankReport) -> str:
    failed = [result.name for result in report.results if result.failed]
    if failed:
        return "[error]FAIL[/error] " + ", ".join(failed)
    warned = [result.name for result in report.results if result.status == "warn"]
    return "[warning]WARN[/warning] " + ", ".join(warned) if warned else _MARKS["ok"]


def show_preflight(
    console: Console,
    reports: Sequence[RankReport],
    job_results: Sequence[CheckResult],
    *,
    verbose: bool = False,
) -> None:
    """The table per node/rank, the job-wide checks, then every problem with its fix
    (with `verbose`, every check of every rank as well)."""
    ordered = sorted(reports, key=lambda report: (report.facts.host, report.facts.rank))
    table = Table(title="scaletrain preflight", title_justify="left")
    for column in ("node", "rank", "local", "launcher", "device", "cores", "threads", "checks"):
        table.add_column(column)
    for report in ordered:
        facts = report.facts
        table.add_row(
            facts.host,
            str(facts.rank),
            str(facts.local_rank),
            facts.launcher,
            facts.device if len(facts.device) <= 14 else facts.device[:13] + "…",
            compact_list(facts.cpus),
            str(facts.threads),
            _rank_status(report),
        )
    console.print(table)
    if verbose:
        for report in ordered:
            for result in report.results:
                _say(
                    console,
                    f"  rank {report.facts.rank} {result.name}: {_mark(result)}",
                    result.seen,
                )
    for result in job_results:
        _say(console, f"  job {result.name}: {_mark(result)}", result.seen)
    problems = _problems(reports, job_results)
    for result, where in problems:
        _say(console, f"{_mark(result)} {result.name} ({escape(where)}):", result.seen)
        _say(console, "  [warning]fix:[/warning]", result.fix)
    checks = len(reports[0].results) if reports else 0
    failed = sum(1 for result, _ in problems if result.failed)
    if failed:
        console.print(
            f"[error]preflight failed[/error]: {failed} problem(s) on {len(reports)} rank(s); "
            "training would not start"
        )
    else:
        console.print(
            f"[success]preflight passed[/success]: {checks} checks on each of "
            f"{len(reports)} rank(s), {len(job_results)} job-wide"
        )


def show_rank_alone(console: Console, who: str, results: Sequence[CheckResult]) -> None:
    """A rank that could not join the group reports its own results."""
    _say(console, "[error]preflight failed[/error] before joining the group on", who)
    for result in results:
        _say(console, f"  {result.name}: {_mark(result)}", result.seen)
        if result.failed:
            _say(console, "    [warning]fix:[/warning]", result.fix)


def preflight_record(
    reports: Sequence[RankReport], job_results: Sequence[CheckResult]
) -> dict[str, Any]:
    failed = any(r.failed for r in reports) or any(r.failed for r in job_results)
    return {
        "passed": not failed,
        "ranks": [report.to_dict() for report in reports],
        "job": [
            {"name": r.name, "status": r.status, "seen": r.seen, "fix": r.fix} for r in job_results
        ],
    }


def write_json(path: Path, record: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
