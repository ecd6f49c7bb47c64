"""Write docs/mutation-report.md from mutmut's results (run by scripts/mutation.sh).

Per module: mutants made, killed (a test failed), survived (no test noticed), no test ran
them, and the survival rate = survived / (killed + survived + timed out). Each survivor is
listed with its change and the reason a reader gave in scripts/mutation-reasons.toml (why
it is harmless), else "unexplained": no survivor is explained by the shape of its change.
A survivor that the multi-rank tests kill (scripts/mutation_ranks.py, for code that runs only
with more than one rank) counts as killed by them, with the tests named.

A reason names the function and the exact change (the line removed and the line added), not
mutmut's number of the mutant, which shifts when the function changes: a reason stays with
the change it was written for, and one whose change is gone is listed as stale.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from scaletrain.core.toml_text import parse_toml

REPO = Path(__file__).resolve().parents[1]
MUTMUT = [str(Path(sys.executable).with_name("mutmut"))]
REPORT = REPO / "docs" / "mutation-report.md"
REASONS = REPO / "scripts" / "mutation-reasons.toml"
RANK_RESULTS = REPO / "mutants" / "rank-results.json"
# mutmut names a mutant <module>.x_<function>__mutmut_<n> or <module>.xǁ<Class>ǁ<method>...
MODULE = re.compile(r"^(?P<module>.+?)\.x[_ǁ]")
NUMBER = re.compile(r"__mutmut_\d+$")


@dataclass(frozen=True)
class Change:
    """One mutant's change: its function (mutmut's name without the number) and lines."""

    function: str
    removed: str
    added: str


def read_reasons(path: Path) -> dict[Change, str]:
    """scripts/mutation-reasons.toml: [[survivor]] tables of function, removed, added, why."""
    if not path.is_file():
        return {}
    return {
        Change(entry["function"], entry["removed"], entry["added"]): entry["why"]
        for entry in parse_toml(path.read_text(encoding="utf-8")).get("survivor", [])
    }


def results() -> dict[str, str]:
    """Every mutant's name and status, from `mutmut results --all true`."""
    output = subprocess.run(
        [*MUTMUT, "results", "--all", "true"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
        timeout=600,
    ).stdout
    found = {}
    for line in output.splitlines():
        name, _, status = line.strip().rpartition(": ")
        if name:
            found[name] = status
    return found


def change(name: str) -> Change:
    """The change a mutant makes: its function, and the lines it removed and added
    (stripped, joined by spaces)."""
    diff = subprocess.run(
        [*MUTMUT, "show", name], cwd=REPO, capture_output=True, text=True, timeout=600
    ).stdout
    lines = diff.splitlines()
    removed = [line[1:].strip() for line in lines if line[:1] == "-" and line[:3] != "---"]
    added = [line[1:].strip() for line in lines if line[:1] == "+" and line[:3] != "+++"]
    return Change(NUMBER.sub("", name), " ".join(removed), " ".join(added))


def killed_by_ranks(statuses: dict[str, str]) -> dict[str, list[str]]:
    """The in-process survivors the multi-rank tests killed, with those tests; a result made
    for another change of the function (the code changed since) does not count."""
    if not RANK_RESULTS.is_file():
        return {}
    found = json.loads(RANK_RESULTS.read_text(encoding="utf-8"))
    return {
        name: result["tests"]
        for name, result in found.items()
        if result["status"] == "killed"
        and statuses.get(name) == "survived"
        and Change(**result["change"]) == change(name)
    }


def tested_commit() -> str:
    """The commit whose code and tests the run used (the run keeps results across commits:
    a result is as old as the run that made it)."""
    return subprocess.run(
        ["git", "log", "-1", "--format=%h (%cs)"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()


def main() -> None:
    statuses = results()
    by_ranks = killed_by_ranks(statuses)
    statuses |= dict.fromkeys(by_ranks, "killed by ranks")
    reasons = read_reasons(REASONS)
    by_module: dict[str, Counter[str]] = defaultdict(Counter)
    for name, status in statuses.items():
        by_module[MODULE.match(name)["module"] if MODULE.match(name) else name][status] += 1
    lines = [
        "# Mutation testing report",
        "",
        "Written by `bash scripts/mutation.sh` (mutmut, settings in pyproject.toml",
        f"[tool.mutmut]) on {datetime.now(timezone.utc):%Y-%m-%d}. A mutant is one small change",
        "of the code (a `<` for a `<=`, a `+ 1`, a string emptied); the fast tests of that code",
        "run against it. *Survived*: no test noticed. Survival rate = survived / (killed +",
        "survived + timed out); *no tests*: no selected test runs that code; *not run*: the",
        "last run stopped before it reached them (`bash scripts/mutation.sh` continues where",
        "it stopped: results are kept in mutants/). *Killed by ranks*: survived the",
        "in-process run, killed by a multi-rank test (scripts/mutation_ranks.py), for code",
        "that runs only with more than one rank.",
        "",
        f"Run on the code and tests of commit {tested_commit()}.",
        "",
        "| module | mutants | killed | killed by ranks | survived | timed out | no tests | not run "
        "| survival rate |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for module, counts in sorted(by_module.items()):
        killed = counts["killed"] + counts["killed by ranks"]
        tested = killed + counts["survived"] + counts["timeout"]
        rate = f"{counts['survived'] / tested:.0%}" if tested else "-"
        lines.append(
            f"| `{module}` | {sum(counts.values())} | {counts['killed']} | "
            f"{counts['killed by ranks']} | {counts['survived']} | {counts['timeout']} | "
            f"{counts['no tests']} | {counts['not checked']} | {rate} |"
        )
    survivors = sorted(name for name, status in statuses.items() if status == "survived")
    changes = {name: change(name) for name in survivors}
    unexplained = [name for name in survivors if changes[name] not in reasons]
    lines += [
        "",
        f"## Survivors ({len(survivors)}, {len(unexplained)} unexplained)",
        "",
        "Each with why it is harmless, as read in the code (scripts/mutation-reasons.toml), or",
        "*unexplained*: a test to write, or a reason to read and write down.",
        "",
    ]
    for name in survivors:
        found = changes[name]
        why = reasons.get(found, "*unexplained*")
        lines += [f"- `{name}`: `{found.removed}` → `{found.added}`", f"  {why}"]
    if by_ranks:
        lines += ["", f"## Killed by the multi-rank tests ({len(by_ranks)})", ""]
        lines += [f"- `{name}`: {', '.join(tests)}" for name, tests in sorted(by_ranks.items())]
    tested_functions = {
        NUMBER.sub("", name) for name, status in statuses.items() if status != "not checked"
    }
    stale = [
        reason
        for reason in reasons
        if reason.function in tested_functions and reason not in changes.values()
    ]
    if stale:
        lines += ["", f"## Reasons whose change no survivor makes any more ({len(stale)})", ""]
        lines += [
            f"- `{reason.function}`: `{reason.removed}` → `{reason.added}`" for reason in stale
        ]
    REPORT.write_text("\n".join(lines) + "\n")
    print(f"wrote {REPORT}")


if __name__ == "__main__":
    main()
