"""The one place that prints for people: results on stdout, everything else on stderr.

A command's result (the table it exists to show, JSON, a job script) goes to stdout, so that
`scaletrain clusters | grep lumi` works; notes, progress, warnings and errors go to stderr.
No text is read as rich markup: messages are plain text and styles (named by meaning) are
attached to whole pieces, so a job name `[bold]x` or the hint `pip install
'scaletrain[torch]'` prints exactly as written. Output that is not a terminal is not
wrapped (a pipe or a log file gets whole lines) unless COLUMNS is exported. rich honours
NO_COLOR.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Collection, Iterable, Sequence
from typing import Any

from rich.console import Console, RenderableType
from rich.table import Table
from rich.text import Text
from rich.theme import Theme

THEME = Theme(
    {
        "success": "bold green",
        "error": "bold red",
        "warning": "yellow",
        "info": "cyan",
        "muted": "dim",
        "heading": "bold",
    }
)

# Wide enough for any line: output into a pipe or a file is not wrapped.
_UNWRAPPED_WIDTH = 100_000

# A piece of a line: plain text, or (text, style name from THEME).
Piece = str | tuple[str, str] | Text


def _console(*, stderr: bool) -> Console:
    """A console on the current stdout or stderr (tests and pipes may replace them)."""
    console = Console(stderr=stderr, theme=THEME, highlight=False)
    if not console.is_terminal and "COLUMNS" not in os.environ:
        # An exported COLUMNS is a width asked for (rich reads it): kept, as in a terminal.
        console.width = _UNWRAPPED_WIDTH
    return console


def notes() -> Console:
    """stderr, for people: notes, progress, warnings, errors."""
    return _console(stderr=True)


def results() -> Console:
    """stdout: what the command was asked to show."""
    return _console(stderr=False)


def text(*pieces: Piece) -> Text:
    """Plain text with styles on whole pieces; nothing in it is read as markup."""
    return Text.assemble(*pieces)


def table(
    rows: Iterable[Sequence[Piece]],
    *,
    title: str | None = None,
    columns: Sequence[str] = (),
    right_aligned: Collection[str] = (),
    **options: Any,
) -> Table:
    """A table whose every cell and title is plain text (never markup); the columns named in
    `right_aligned` (numbers) line up on the right."""
    shown = Table(
        title=Text(title) if title else None,
        title_justify="left",
        show_header=bool(columns),
        **options,
    )
    for column in columns:
        shown.add_column(Text(column), justify="right" if column in right_aligned else "left")
    for row in rows:
        shown.add_row(*(text(cell) for cell in row))
    return shown


# Characters that would break a message into lines or drive the terminal (ESC), shown as
# escapes instead: every message stays one line, as written.
_UNPRINTABLE = {
    code: f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
    for code in (*range(0x20), 0x7F, 0x85, 0x2028, 0x2029)
    if code != ord("\t")
}


def one_line(message: str) -> str:
    """`message` with line breaks and control characters written as escapes (\\n, \\x1b)."""
    return message.translate(_UNPRINTABLE)


def _say(*pieces: Piece) -> None:
    # soft_wrap: a message stays one line whatever the terminal width, so logs can be grepped.
    printable = [
        one_line(piece) if isinstance(piece, str)
        else (one_line(piece[0]), piece[1]) if isinstance(piece, tuple)
        else piece
        for piece in pieces
    ]  # fmt: skip
    notes().print(text(*printable), soft_wrap=True)


def heading(message: str) -> None:
    _say((message, "heading"))


def info(message: str) -> None:
    _say((message, "info"))


def success(message: str) -> None:
    _say(("✓", "success"), " ", message)


def warning(message: str) -> None:
    _say(("warning:", "warning"), " ", message)


def error(problem: str, hint: str | None = None) -> None:
    _say(("error:", "error"), " ", problem)
    if hint:
        _say(("HINT:", "warning"), " ", hint)


def note(renderable: RenderableType) -> None:
    """A table or text for people, on stderr (e.g. a run's other ranks' errors)."""
    notes().print(renderable)


def show(renderable: RenderableType) -> None:
    """A result on stdout: a table or text the command was asked to show."""
    results().print(renderable)


def show_text(text: str, *, stderr: bool = False) -> None:
    """A result on stdout exactly as given, byte for byte (a job script, #SBATCH lines); on
    stderr what a program wrote to its stderr (a rank's log)."""
    stream = sys.stderr if stderr else sys.stdout
    stream.write(text)
    stream.flush()


def show_json(data: Any) -> None:
    """A result as JSON on stdout (`--json`): one document, indented, UTF-8 as it is."""
    print(json.dumps(data, indent=2, ensure_ascii=False, default=str))
