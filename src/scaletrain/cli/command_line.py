"""The click classes behind every command: one error path, and help that reads cleanly.

Errors: a problem the user can fix (ScaletrainError, a file that cannot be read, a usage
mistake) is one `error:` line and a `HINT:` line with exit code 2; anything else is a bug,
reported in one line with exit code 70 (EX_SOFTWARE) and a request to rerun with --debug,
which shows the traceback instead. No user input ever ends in a traceback without --debug.

Help: paragraphs are joined (typer keeps the docstring's line breaks mid-sentence), flags
show no `<bool>` (they take no value), and usage lines show `SCRIPT [ARGS]...` where typer
would write `{script}`.
"""

from __future__ import annotations

import errno
import sys
from collections.abc import Sequence
from typing import Any, NoReturn

import typer
from typer import _click
from typer.core import TyperArgument, TyperCommand, TyperGroup, TyperOption

from scaletrain.core import console
from scaletrain.core.errors import ScaletrainError
from scaletrain.core.files import os_problem

USAGE_EXIT_CODE = 2
INTERNAL_ERROR_EXIT_CODE = 70  # EX_SOFTWARE (sysexits.h): a bug in scaletrain, not user input


def _paragraphs(text: str | None) -> str | None:
    """Help text with the line breaks inside each paragraph removed."""
    if not text:
        return text
    return "\n\n".join(" ".join(paragraph.split()) for paragraph in text.split("\n\n"))


def _polish(command: _click.Command) -> None:
    command.help = _paragraphs(command.help)
    for parameter in command.params:
        _polish_parameter(parameter)


def _polish_parameter(parameter: _click.Parameter) -> None:
    # A flag takes no value; typer would show `<bool>`, and users then type `--debug true`.
    if getattr(parameter, "is_flag", False):
        parameter.metavar = ""
    elif isinstance(parameter, TyperArgument) and parameter.metavar:
        # The metavar says what to give (SCRIPT, PATH...); typer's <str>/<list[Path]> does not.
        parameter.display_type_rich = lambda ctx: None  # type: ignore[method-assign]


def _usage_pieces(command: _click.Command, ctx: _click.Context) -> list[str]:
    """`[OPTIONS] SCRIPT [ARGS]...`: arguments by their metavar, optional ones in brackets."""
    pieces = [command.options_metavar] if command.options_metavar else []
    for parameter in command.get_params(ctx):
        if isinstance(parameter, TyperArgument):
            name = parameter.metavar or (parameter.name or "").upper()
            pieces.append(name if parameter.required else f"[{name}]")
    return pieces


def _help_option(command: _click.Command, ctx: _click.Context) -> TyperOption | None:
    option = _click.Command.get_help_option(command, ctx)
    if option is not None:
        _polish_parameter(option)
        # Absent, the flag is False rather than None: typer then takes it as it is instead of
        # building a pydantic validator for it, which would import pydantic into every command.
        option.default = False
    return option


class ScaletrainCommand(TyperCommand):
    """A sub-command (`plan`, `clusters show`, ...)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _polish(self)

    def get_help_option(self, ctx: _click.Context) -> TyperOption | None:
        return _help_option(self, ctx)

    def collect_usage_pieces(self, ctx: _click.Context) -> list[str]:
        return _usage_pieces(self, ctx)


class ScaletrainGroup(TyperGroup):
    """`scaletrain` and `scaletrain clusters`: the one place where errors are shown."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        _polish(self)

    def get_help_option(self, ctx: _click.Context) -> TyperOption | None:
        return _help_option(self, ctx)

    def invoke(self, ctx: _click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except (typer.Exit, typer.Abort, _click.exceptions.ClickException):
            raise
        except Exception as problem:
            if ctx.find_root().params.get("debug") or isinstance(problem, BrokenPipeError):
                raise
            _fail(problem)

    def main(
        self,
        args: Sequence[str] | None = None,
        prog_name: str | None = None,
        complete_var: str | None = None,
        standalone_mode: bool = True,
        windows_expand_args: bool = True,
        **extra: Any,
    ) -> Any:
        try:
            outcome = super().main(
                args, prog_name, complete_var, False, windows_expand_args, **extra
            )
            code = outcome if isinstance(outcome, int) else 0
        except _click.exceptions.NoArgsIsHelpError as shown:
            code = shown.exit_code  # typer printed the help: that is the answer
        except _click.exceptions.ClickException as mistake:
            code = _show_usage_error(mistake)
        except typer.Abort:
            console.error("interrupted.")
            code = 130
        if standalone_mode:
            sys.exit(code)
        return code


def _fail(problem: Exception) -> NoReturn:
    """Show a problem in one line (two with its hint) and exit."""
    if isinstance(problem, ScaletrainError):
        console.error(problem.problem, problem.hint)
        raise typer.Exit(USAGE_EXIT_CODE)
    if isinstance(problem, OSError) and problem.errno != errno.EPIPE:
        # A file or folder the user named (--runs-dir, a profile, a log) that cannot be used.
        known = os_problem(problem)
        console.error(known.problem, known.hint)
        raise typer.Exit(USAGE_EXIT_CODE)
    console.error(
        f"internal error: {type(problem).__name__}: {problem}",
        "this is a bug in scaletrain, not in your input: rerun with --debug for the traceback "
        "and report it with the command you ran.",
    )
    raise typer.Exit(INTERNAL_ERROR_EXIT_CODE)


def _show_usage_error(mistake: _click.exceptions.ClickException) -> int:
    context = getattr(mistake, "ctx", None)
    where = context.command_path if context is not None else "scaletrain"
    console.error(
        mistake.format_message().rstrip(".") + ".",
        f"see `{where} --help` for its arguments and options.",
    )
    return mistake.exit_code
