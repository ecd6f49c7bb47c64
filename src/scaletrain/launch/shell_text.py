"""Shell-safe text for generated job scripts: values are quoted, template code is marked.

The job-script templates write every `{{ value }}` through `finalize`, which shell-quotes it
(shlex.quote) unless it is `ShellCode`: text that the templates built themselves, or a value
already quoted with the `shell_quote` filter. So a job name, a path or an argument such as
`$(rm -rf ~)` reaches the script as one inert word, even where a template forgot to quote.
`#SBATCH` lines are not shell (bash skips them, sbatch parses them), so their options are
checked instead: a value sbatch would misread, or a newline that ends the comment, is an error.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable
from typing import Any

from scaletrain.core.errors import ScaletrainError

# `--key` or `--key=value`, with only characters that sbatch reads as one word and that
# cannot end the `#SBATCH` comment: time 1-00:00:00, gres gpu:v100:4, signal B:USR1@300,
# output logs/%x-%j.out, lists 0xfe,0xfe00.
_SBATCH_OPTION = re.compile(r"--[a-z][a-z-]*(=[A-Za-z0-9_.:,@%+/=-]+)?")
# Slurm writes the job name into file names (%x) and squeue columns: keep it one plain word,
# and one that is neither `.`/`..` as a folder name nor an option (`-x`) on a command line.
_JOB_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.+-]{0,127}")


class ShellCode(str):
    """Text written into a script as it is: template code, or a value already quoted."""

    __slots__ = ()


def shell_quote(value: Any) -> ShellCode:
    """One shell word that means exactly `value` (shlex.quote); numbers stay as they are."""
    return ShellCode(shlex.quote(str(value)))


def shell_words(values: Iterable[Any]) -> ShellCode:
    """Several values as shell words, each quoted, separated by spaces."""
    return ShellCode(shlex.join(str(value) for value in values))


def shell_code(value: Any) -> ShellCode:
    """Mark text the templates built (a macro's output, a profile's setup line) as code."""
    return ShellCode(str(value))


def finalize(value: Any) -> str:
    """What `{{ value }}` writes: ShellCode as it is, anything else quoted."""
    return value if isinstance(value, ShellCode) else shell_quote(value)


def expandable(value: Any) -> ShellCode:
    """A value the job's shell expands: in double quotes, so `$USER`, `${SLURM_JOB_ID}` and
    `$(...)` work and nothing else splits it. For values a user or profile marked so."""
    text = str(value)
    if any(character in text for character in "\n\r"):
        raise ScaletrainError(
            f"{text!r} cannot be exported: it contains a line break.",
            "give the value on one line.",
        )
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return ShellCode(f'"{escaped}"')


def one_line(value: Any) -> ShellCode:
    """A value for a comment: as it is, since a comment runs nothing, unless a line break in
    it would end the comment and turn the rest into a command."""
    text = str(value)
    if any(character in text for character in "\n\r\x0b\x0c"):
        raise ScaletrainError(
            f"{text!r} cannot be written into a job script comment: it contains a line break.",
            "remove the line break from that name.",
        )
    return ShellCode(text)


def sbatch_option(option: str) -> ShellCode:
    """An option for an `#SBATCH` line, or an error when sbatch would misread it."""
    if not _SBATCH_OPTION.fullmatch(option):
        raise ScaletrainError(
            f"{option!r} cannot be written as an #SBATCH line: sbatch reads only "
            "`--name=value` with letters, digits and _.:,@%+/=- in the value.",
            "remove spaces, quotes and other signs from that value (e.g. the account name).",
        )
    return ShellCode(option)


def check_job_name(name: str, what: str = "job name") -> str:
    """The name, if Slurm can use it as a job name and file-name part (%x); else an error."""
    if not _JOB_NAME.fullmatch(name):
        raise ScaletrainError(
            f"The {what} {name!r} is not usable as a Slurm job name: it must be 1-128 letters, "
            "digits and . _ + -, starting with a letter, digit or _ (Slurm puts it into file "
            "names).",
            "choose a name such as mnist-16gpu or resnet_lr0.1.",
        )
    return name
