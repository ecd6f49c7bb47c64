"""The one place that prints for people: rich on stderr, styles named by meaning.

Machine output (job scripts, JSON) goes to stdout with plain print. rich honours NO_COLOR.
"""

from __future__ import annotations

from rich.console import Console
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

console = Console(stderr=True, theme=THEME, highlight=False)


def heading(text: str) -> None:
    console.print(f"[heading]{text}[/heading]")


def info(text: str) -> None:
    console.print(f"[info]{text}[/info]")


def success(text: str) -> None:
    console.print(f"[success]✓[/success] {text}")


def warning(text: str) -> None:
    console.print(f"[warning]warning:[/warning] {text}")


def error(problem: str, hint: str | None = None) -> None:
    # soft_wrap: an error stays one line whatever the terminal width, so logs can be grepped.
    console.print(f"[error]error:[/error] {problem}", soft_wrap=True)
    if hint:
        console.print(f"[warning]HINT:[/warning] {hint}", soft_wrap=True)
