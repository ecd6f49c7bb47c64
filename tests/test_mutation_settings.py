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


def test_every_reason_names_a_function_of_a_mutated_module_and_its_change() -> None:
    """A reason is written for one change of one function (scripts/mutation_report.py reads
    them so): a typo in a key would break the report after an hours-long run."""
    reasons = parse_toml((ROOT / "scripts" / "mutation-reasons.toml").read_text(encoding="utf-8"))
    entries = reasons["survivor"]
    assert entries and set(reasons) == {"survivor"}
    mutated = [
        pattern.removeprefix("src/").removesuffix(".py").replace("/", ".").replace("*", "")
        for pattern in mutation_settings()["only_mutate"]
    ]
    for entry in entries:
        assert set(entry) == {"function", "removed", "added", "why"}, entry
        assert entry["removed"] != entry["added"] and entry["why"].strip(), entry
        assert "__mutmut_" not in entry["function"], entry
        assert any(entry["function"].startswith(module) for module in mutated), entry


def test_every_rank_test_the_mutation_run_names_exists() -> None:
    """scripts/mutation_ranks.py runs these after the hours-long in-process run."""
    tables = parse_toml((ROOT / "scripts" / "mutation-rank-tests.toml").read_text())["rank_tests"]
    assert tables
    for table in tables:
        assert set(table) == {"functions", "tests"} and table["functions"], table
        for test in table["tests"]:
            path, _, name = test.partition("::")
            assert (ROOT / path).is_file(), test
            assert not name or f"def {name.split('[')[0]}(" in (ROOT / path).read_text(), test
