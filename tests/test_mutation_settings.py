"""The mutation run's settings (pyproject.toml [tool.mutmut]) name files that exist: a test
file moved without updating them makes `bash scripts/mutation.sh` fail at its first step,
which nothing else runs."""

from __future__ import annotations

from pathlib import Path

from scaletrain.core.toml_text import parse_toml

ROOT = Path(__file__).resolve().parents[1]


def mutation_settings() -> dict:
    return parse_toml((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]


def test_every_test_file_the_mutation_run_selects_exists() -> None:
    selected = mutation_settings()["pytest_add_cli_args_test_selection"]
    assert selected
    missing = [path for path in selected if not (ROOT / path).is_file()]
    assert not missing, f"moved or deleted; update pyproject.toml [tool.mutmut]: {missing}"


def test_every_module_pattern_the_mutation_run_mutates_matches_a_file() -> None:
    patterns = mutation_settings()["only_mutate"]
    assert patterns
    unmatched = [pattern for pattern in patterns if not list(ROOT.glob(pattern))]
    assert not unmatched, f"no such module; update pyproject.toml [tool.mutmut]: {unmatched}"
