"""Match a job's logs against known failure signatures (signatures.toml) and explain them.

No torch here: the doctor runs on a login node, right after a job failed. A signature is
data: an id, a regular expression, the usual cause and the fix. Named groups in the
expression (e.g. the sizes in an out-of-memory line) are collected per rank, so that a
failure shows which ranks hit it with which numbers. A log that matches no signature but holds
a Python traceback is still a failure: its last traceback's error is reported as one.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path

from scaletrain.core.hang_report import DEFAULT_HANG_LIMIT_S
from scaletrain.core.progress_line import format_duration
from scaletrain.core.rank_files import read_beats, since_last_step
from scaletrain.core.run_folder import RunFolder

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

# Where a log line says which rank wrote it: our per-rank files, torchrun's prefixes.
_RANK_IN_NAME = re.compile(r"rank-?(\d+)")
_RANK_IN_LINE = re.compile(r"^\[?\[?[Rr]ank ?(\d+)\]?:?|\[Rank (\d+)\]")
# What a launcher puts before each line of a rank: torchrun's [rank1]: or [default1]:, srun
# --label's "1: ". Ranks' tracebacks interleave in a job's log; each is followed by its prefix.
_LINE_PREFIX = re.compile(r"^(?:\[(?:rank|default)?\d+\]: ?|\d+: )")
_FRAME = re.compile(r'^\s+File "(?P<file>[^"]+)", line (?P<line>\d+), in (?P<function>.+)')
# torchrun's own error after a rank failed: it only points at the rank's, which is reported.
_LAUNCHER_ERROR = "ChildFailedError"
# Keep the per-rank picture readable: at most this many matches with details per finding.
MAX_DETAILS = 64
# An error message in that picture is cut to this many characters.
_ERROR_CHARACTERS = 120


@dataclass(frozen=True, kw_only=True, slots=True)
class Signature:
    """A known failure: how its log line looks, what usually causes it, how to fix it."""

    id: str
    title: str
    pattern: re.Pattern[str]
    cause: str
    fix: str
    scope: str = "log"
    """'log' for job output; 'script' for the training script's source; 'traceback' for the
    last Python error of a log that no 'log' signature matched (`pattern` opens a traceback)."""
    absent: re.Pattern[str] | None = None
    """For script signatures: the finding counts only when this does not occur in the file."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Location:
    path: str
    line_number: int
    line: str


@dataclass(kw_only=True, slots=True)
class Finding:
    """Every place one signature matched."""

    signature: Signature
    first: Location
    count: int = 0
    ranks: set[int] = field(default_factory=set)
    details: list[dict[str, str]] = field(default_factory=list)

    @property
    def id(self) -> str:
        return self.signature.id


@cache
def load_signatures() -> tuple[Signature, ...]:
    """The signature table shipped in the package."""
    text = (
        resources.files("scaletrain.diagnose")
        .joinpath("signatures.toml")
        .read_text(encoding="utf-8")
    )
    entries = tomllib.loads(text)["signature"]
    return tuple(
        Signature(
            **{
                **entry,
                "pattern": re.compile(entry["pattern"]),
                "absent": re.compile(entry["absent"]) if "absent" in entry else None,
            }
        )
        for entry in entries
    )


def _rank_of(path: str, line: str) -> int | None:
    in_line = _RANK_IN_LINE.search(line)
    if in_line:
        return int(in_line.group(1) or in_line.group(2))
    in_name = _RANK_IN_NAME.search(Path(path).name)
    return int(in_name.group(1)) if in_name else None


def _record(
    findings: dict[str, Finding],
    signature: Signature,
    where: Location,
    values: Mapping[str, str] | None = None,
) -> None:
    """Count a match; `values` for the per-rank table (default: the pattern's named groups)."""
    finding = findings.setdefault(signature.id, Finding(signature=signature, first=where))
    finding.count += 1
    rank = _rank_of(where.path, where.line)
    if rank is not None:
        finding.ranks.add(rank)
    if values is None:
        match = signature.pattern.search(where.line)
        values = {k: v for k, v in match.groupdict().items() if v} if match else {}
    if values and len(finding.details) < MAX_DETAILS:
        finding.details.append({"rank": "?" if rank is None else str(rank), **values})


@dataclass(slots=True)
class _Tracebacks:
    """The Python tracebacks of one log, line by line: the last one's error line and the
    frame that raised it."""

    opener: re.Pattern[str]
    path: str
    last: tuple[Location, str] | None = None
    launcher: tuple[Location, str] | None = None
    """The last launcher's ChildFailedError, reported only if no rank's error is found."""
    _raised_at: dict[str, str] = field(default_factory=dict)
    """Per line prefix with a traceback open: where its newest frame points."""

    def read(self, number: int, raw: str) -> None:
        prefix_match = _LINE_PREFIX.match(raw)
        prefix = prefix_match.group(0) if prefix_match else ""
        line = raw[len(prefix) :]
        if self.opener.match(line):
            self._raised_at[prefix] = "?"
        elif prefix not in self._raised_at or not line.strip():
            return
        elif frame := _FRAME.match(line):
            self._raised_at[prefix] = f"{frame['file']}:{frame['line']} in {frame['function']}"
        elif not line[0].isspace():  # the error itself ends the traceback
            where = Location(path=self.path, line_number=number, line=raw)
            found = (where, self._raised_at.pop(prefix))
            if _LAUNCHER_ERROR in line:
                self.launcher = found
            else:
                self.last = found

    def error(self) -> tuple[Location, str] | None:
        return self.last or self.launcher


def _scan_log(path: str, lines: Iterable[str], findings: dict[str, Finding]) -> None:
    signatures = [s for s in load_signatures() if s.scope == "log"]
    (error_signature,) = [s for s in load_signatures() if s.scope == "traceback"]
    tracebacks = _Tracebacks(opener=error_signature.pattern, path=path)
    matched = False
    for number, line in enumerate(lines, start=1):
        tracebacks.read(number, line)
        for signature in signatures:
            if signature.pattern.search(line):
                _record(findings, signature, Location(path=path, line_number=number, line=line))
                matched = True
    error = tracebacks.error()
    if error is not None and not matched:  # an error no signature explains is still one
        where, raised_at = error
        message = _LINE_PREFIX.sub("", where.line).strip()[:_ERROR_CHARACTERS]
        _record(findings, error_signature, where, {"error": message, "raised at": raised_at})


def _scan_script(path: str, text: str, findings: dict[str, Finding]) -> None:
    for signature in load_signatures():
        if signature.scope != "script" or (signature.absent and signature.absent.search(text)):
            continue
        for number, line in enumerate(text.splitlines(), start=1):
            if signature.pattern.search(line):
                _record(findings, signature, Location(path=path, line_number=number, line=line))
                break


def match_text(text: str, name: str = "<text>") -> list[Finding]:
    """Findings in a piece of log text, in table order."""
    findings: dict[str, Finding] = {}
    _scan_log(name, (line.rstrip("\n") for line in text.splitlines()), findings)
    return _ordered(findings)


def heartbeat_facts(folder: RunFolder) -> list[str]:
    """The run's heartbeats as a log line when its training went silent: no step for longer
    than the default hang limit while its processes never said they ended."""
    beats = read_beats(folder)
    silent = since_last_step(beats)
    unended = [str(rank) for rank, beat in beats.items() if beat.phase != "ended"]
    if silent is None or silent < DEFAULT_HANG_LIMIT_S or not unended:
        return []
    step = max(beat.step for beat in beats.values())
    last = max(beat.last_step_time or "" for beat in beats.values())
    ranks = f"{unended[0]}-{unended[-1]}" if len(unended) > 1 else unended[0]
    return [
        f"scaletrain heartbeat: no step for {format_duration(silent)} after step {step} "
        f"(ranks {ranks} never ended; last step {last})"
    ]


def diagnose_files(
    paths: Sequence[Path], facts: Mapping[str, Sequence[str]] | None = None
) -> list[Finding]:
    """Findings in log files, training scripts (*.py) and `facts` (name -> lines, read as
    logs: what the doctor found out about a run folder), in table order."""
    findings: dict[str, Finding] = {}
    for name, fact_lines in (facts or {}).items():
        _scan_log(name, fact_lines, findings)
    for path in paths:
        if path.suffix == ".py":
            _scan_script(str(path), path.read_text(errors="replace"), findings)
            continue
        with path.open(errors="replace") as lines:
            _scan_log(str(path), (line.rstrip("\n") for line in lines), findings)
    return _ordered(findings)


def _ordered(findings: dict[str, Finding]) -> list[Finding]:
    order = {signature.id: index for index, signature in enumerate(load_signatures())}
    return sorted(findings.values(), key=lambda finding: order[finding.id])
