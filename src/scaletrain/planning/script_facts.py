"""What a training script shows of itself before it runs: what it imports, whether it resumes,
how it picks its GPU, whether it takes DeepSpeed's --local_rank.

Scripts arrive as their authors wrote them for some launcher (a site's guide, a workshop, a
colleague), so `submit` reads them and starts each the way it expects, and says what it read.
Reading is by the script's syntax tree (imports) and by the patterns of script_patterns.toml
(the rest), without running it. A finding is a guess about code: every decision made from one
can be forced with an option, and `submit` shows what it decided and why.
"""

from __future__ import annotations

import ast
import io
import re
import sys
import tokenize
from dataclasses import dataclass
from functools import cache
from importlib.resources import files
from pathlib import Path
from typing import Any

from scaletrain.core.toml_text import parse_toml


@dataclass(frozen=True, kw_only=True, slots=True)
class ScriptFacts:
    """What was found in a script; empty when the script could not be read."""

    imports: tuple[str, ...] = ()
    """Top-level packages imported when the script starts (not in try blocks), without the
    standard library and modules that are files or folders beside the script."""
    resumes: tuple[str, ...] = ()
    """What in the script continues from a checkpoint (e.g. "st.Checkpointer")."""
    device_by_local_rank: tuple[str, ...] = ()
    """What the script reads to choose its GPU by local rank (e.g. "LOCAL_RANK")."""
    device_zero: tuple[str, ...] = ()
    """Signs that it uses the first visible GPU whatever its rank (e.g. "cuda:0")."""
    local_rank_option: str | None = None
    """The spelling of the local-rank option the script's parser accepts, if any."""
    parses_arguments: bool = False
    """It has an argument parser, which stops at an option it does not know."""

    @property
    def uses_scaletrain(self) -> bool:
        return "scaletrain" in self.imports

    @property
    def unknown_imports(self) -> tuple[str, ...]:
        """Imports that are not known packages: perhaps modules of the user's own that the
        script finds through sys.path, which no check can see from outside."""
        return tuple(name for name in self.imports if name not in known_packages())


def read_script_facts(script: Path) -> ScriptFacts:
    """The facts of the script at `script`; empty for a missing or unreadable one (the job
    reports such a script itself)."""
    try:
        source = script.read_text(encoding="utf-8")
        tree = ast.parse(source, filename=str(script))
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return ScriptFacts()
    return script_facts(source, tree, script.parent)


def script_facts(source: str, tree: ast.Module, folder: Path) -> ScriptFacts:
    """The facts of a script's `source` (parsed as `tree`) that lies in `folder`."""
    code = _without_comments(source)
    option = _matches(code, "local_rank_option", group=True)
    if not option and _matches(code, "local_rank_parser"):
        option = ("--local_rank",)
    return ScriptFacts(
        imports=_imports(tree, folder),
        resumes=_matches(code, "resumes"),
        device_by_local_rank=_matches(code, "device_by_local_rank"),
        device_zero=_matches(code, "device_zero"),
        local_rank_option=option[0] if option else None,
        parses_arguments=bool(_matches(code, "argument_parser")) or bool(option),
    )


@cache
def known_packages() -> frozenset[str]:
    """Import names of packages that are installed, never files of the user's."""
    names = _patterns_file()["known_packages"]
    return frozenset(str(name) for name in names)


@cache
def _patterns_file() -> dict[str, Any]:
    text = (files("scaletrain.planning") / "script_patterns.toml").read_text(encoding="utf-8")
    return parse_toml(text)


@cache
def _patterns(kind: str) -> tuple[tuple[str, re.Pattern[str]], ...]:
    table = _patterns_file()[kind]
    assert isinstance(table, dict)
    return tuple((label, re.compile(pattern)) for label, pattern in table.items())


def _matches(code: str, kind: str, *, group: bool = False) -> tuple[str, ...]:
    """The labels of the `kind` patterns found in `code`, in the file's order; with `group`,
    what each pattern's first group matched instead."""
    found = []
    for label, pattern in _patterns(kind):
        match = pattern.search(code)
        if match:
            found.append(match.group(1) if group else label)
    return tuple(found)


def _without_comments(source: str) -> str:
    """The source without its comments: a commented-out line is not what the script does."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
        kept = [token for token in tokens if token.type != tokenize.COMMENT]
        return tokenize.untokenize(kept)
    except (tokenize.TokenError, SyntaxError):
        return source


def _imports(tree: ast.Module, folder: Path) -> tuple[str, ...]:
    names: list[str] = []
    for statement in _run_on_start(tree.body):
        if isinstance(statement, ast.Import):
            names += [alias.name.split(".")[0] for alias in statement.names]
        elif isinstance(statement, ast.ImportFrom) and statement.level == 0 and statement.module:
            names.append(statement.module.split(".")[0])
    return tuple(
        sorted(
            {
                name
                for name in names
                if name not in sys.stdlib_module_names
                and name != "__future__"
                and not (folder / f"{name}.py").exists()
                and not (folder / name).is_dir()
            }
        )
    )


def _run_on_start(body: list[ast.stmt]) -> list[ast.stmt]:
    """Statements that run when the script starts: the body, and `if` blocks (`if __name__
    == "__main__":`)."""
    found: list[ast.stmt] = []
    for statement in body:
        found.append(statement)
        if isinstance(statement, ast.If):
            found += _run_on_start(statement.body) + _run_on_start(statement.orelse)
    return found
