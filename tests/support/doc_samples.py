"""The fenced blocks of README.md and docs/*.md, and how each one is checked.

Every block is one of:

- a **session**: lines `$ command` (continued with a trailing `\\`), each followed by the
  output it prints. The docs test runs each command and compares its output (stdout and
  stderr together) with the lines shown. A line that is just `…` stands for any number of
  lines left out; `…` inside a line stands for any text (a time, a path, a job id). A command
  shown without output, or with only `…`, must exit with 0.
- code or data: ```` ```python ```` must compile, ```` ```toml ```` must parse (and a cluster
  profile must validate), ```` ```json ```` must parse line by line.
- marked `<!-- not run: why -->` on the line just above its opening fence: a layout, a
  synopsis, or output that only a real cluster or a long run prints. Say where it is checked
  instead, if anywhere.

Anything else fails the docs test, naming the block and these choices.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

# `…` alone on a line: any number of lines; inside a line: any text.
OMITTED = "…"
NOT_RUN = re.compile(r"<!--\s*not run:\s*(?P<why>\S.*?)\s*-->")
FENCE = re.compile(r"^(?P<fence>```+)(?P<info>[\w+-]*)\s*$")


@dataclass(frozen=True)
class Command:
    """One `$ command` of a session and the output shown under it."""

    text: str
    output: list[str]
    line: int


@dataclass(frozen=True)
class Block:
    """A fenced block: where it is, its info string, its lines, and a `not run` reason."""

    path: Path
    line: int
    info: str
    lines: list[str]
    not_run: str | None = None
    commands: list[Command] = field(default_factory=list)

    @property
    def where(self) -> str:
        return f"{self.path.name}:{self.line}"

    @property
    def is_session(self) -> bool:
        return any(line.startswith("$ ") for line in self.lines)


def blocks(path: Path) -> list[Block]:
    """Every fenced block of a markdown file, sessions split into their commands."""
    found, lines = [], path.read_text(encoding="utf-8").splitlines()
    index = 0
    while index < len(lines):
        opening = FENCE.match(lines[index])
        if not opening:
            index += 1
            continue
        end = index + 1
        while end < len(lines) and lines[end].strip() != opening["fence"]:
            end += 1
        marker = NOT_RUN.search(lines[index - 1]) if index > 0 else None
        body = lines[index + 1 : end]
        found.append(
            Block(
                path=path,
                line=index + 1,
                info=opening["info"],
                lines=body,
                not_run=marker["why"] if marker else None,
                commands=_commands(body, first_line=index + 2),
            )
        )
        index = end + 1
    return found


def _commands(lines: list[str], first_line: int) -> list[Command]:
    commands: list[Command] = []
    index = 0
    while index < len(lines):
        if not lines[index].startswith("$ "):
            index += 1
            continue
        start = index
        text = [lines[index][2:]]
        while text[-1].endswith("\\") and index + 1 < len(lines):
            index += 1
            text.append(lines[index])
        index += 1
        output_start = index
        while index < len(lines) and not lines[index].startswith("$ "):
            index += 1
        output = "\n".join(lines[output_start:index]).strip("\n").splitlines()
        commands.append(Command("\n".join(text), output, first_line + start))
    return commands


def _line_pattern(expected: str) -> str:
    return ".*?".join(re.escape(part) for part in expected.rstrip().split(OMITTED))


def output_matches(expected: list[str], actual: str) -> bool:
    """Whether `actual` is the `expected` lines, `…` marking what was left out."""
    pattern = "".join(
        r"(?:[^\n]*\n)*?" if line.strip() == OMITTED else _line_pattern(line) + r"[ \t]*\n"
        for line in expected
    )
    # Trailing spaces (rich pads its lines) and blank lines around the output do not count.
    lines = [line.rstrip() for line in actual.splitlines()]
    text = "".join(line + "\n" for line in "\n".join(lines).strip("\n").splitlines())
    return re.fullmatch(pattern, text) is not None
