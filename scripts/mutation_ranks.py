"""Run the multi-rank tests against the survivors of the in-process mutation run.

mutmut runs each mutant's tests in one process, so a change on a path that only runs with
more than one rank (a gather of file digests, a broadcast of the checkpoints found) survives
there untested: the tests that start ranks as processes are left out of its selection, and
their ranks would import the installed scaletrain, not the mutant. This pass gives those
tests the mutants: scaletrain comes from mutants/src (PYTHONPATH, which ranks inherit) and the
active mutant is named by MUTANT_UNDER_TEST, which mutmut's trampolines read in every process.

Which tests run for which functions: scripts/mutation-rank-tests.toml. Each test first runs
with MUTANT_UNDER_TEST=fail (every mutated function raises: the test must fail, or its ranks
did not run the mutants) and with no mutant (it must pass). Results go to
mutants/rank-results.json, read by scripts/mutation_report.py.

    .venv/bin/python scripts/mutation_ranks.py            # every survivor a test is named for
"""

from __future__ import annotations

import fnmatch
import json
import os
import subprocess
import sys
import time
from dataclasses import asdict

from mutation_report import REPO, Change, change, results

from scaletrain.core.toml_text import parse_toml

SETTINGS = REPO / "scripts" / "mutation-rank-tests.toml"
RESULTS = REPO / "mutants" / "rank-results.json"
# A rank test takes 10-60 s on 2 idle cores; a mutant that hangs its ranks is stopped here.
TEST_TIMEOUT_S = 600


def rank_tests() -> list[tuple[list[str], list[str]]]:
    """(function patterns, test ids) of each [[rank_tests]] table."""
    tables = parse_toml(SETTINGS.read_text(encoding="utf-8"))["rank_tests"]
    return [(table["functions"], table["tests"]) for table in tables]


def tests_for(name: str, settings: list[tuple[list[str], list[str]]]) -> list[str]:
    function = change_function(name)
    return [
        test
        for patterns, tests in settings
        if any(fnmatch.fnmatchcase(function, pattern) for pattern in patterns)
        for test in tests
    ]


def change_function(name: str) -> str:
    return name.rsplit("__mutmut_", 1)[0]


def run_tests(tests: list[str], mutant: str) -> int:
    """pytest's exit code for `tests` with `mutant` active in every process."""
    environ = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(REPO / "mutants" / "src"), str(REPO)]),
        "MUTANT_UNDER_TEST": mutant,
    }
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", *tests]
    try:
        return subprocess.run(
            command, cwd=REPO, env=environ, capture_output=True, timeout=TEST_TIMEOUT_S
        ).returncode
    except subprocess.TimeoutExpired:
        return -1  # a hang the mutant caused: noticed, as mutmut counts a timeout


def check_setup(tests: list[str]) -> None:
    """The tests pass unmutated and fail when every mutated function raises."""
    if run_tests(tests, "") != 0:
        sys.exit(f"error: {tests} fail without a mutant; fix them before this pass")
    if run_tests(tests, "fail") == 0:
        sys.exit(f"error: {tests} pass with every mutant failing: their ranks do not run mutants/")


def main() -> None:
    settings = rank_tests()
    previous = json.loads(RESULTS.read_text()) if RESULTS.is_file() else {}
    survivors = [name for name, status in results().items() if status == "survived"]
    todo = {name: tests for name in survivors if (tests := tests_for(name, settings))}
    checked: set[tuple[str, ...]] = set()
    found: dict[str, dict[str, object]] = {}
    for number, (name, tests) in enumerate(sorted(todo.items()), 1):
        mutant = change(name)
        kept = previous.get(name)
        if kept and Change(**kept["change"]) == mutant and kept["tests"] == tests:
            found[name] = kept  # same change, same tests: the result stands
            continue
        if tuple(tests) not in checked:
            check_setup(tests)
            checked.add(tuple(tests))
        started = time.monotonic()
        code = run_tests(tests, name)
        status = "survived" if code == 0 else "killed"
        print(
            f"[{number}/{len(todo)}] {name}: {status} ({time.monotonic() - started:.0f} s)",
            flush=True,
        )
        found[name] = {"status": status, "tests": tests, "change": asdict(mutant)}
        RESULTS.write_text(json.dumps(found, indent=1))  # kept if the pass is stopped
    RESULTS.write_text(json.dumps(found, indent=1))
    killed = sum(1 for result in found.values() if result["status"] == "killed")
    print(f"{killed} of {len(found)} survivors killed by the rank tests; wrote {RESULTS}")


if __name__ == "__main__":
    main()
