"""Write docs/mutation-report.md from mutmut's results (run by scripts/mutation.sh).

Per module: mutants made, killed (a test failed), survived (no test noticed), no test ran
them, and the survival rate = survived / (killed + survived + timed out). Each survivor is
listed with its change and the reason a reader gave in scripts/mutation-reasons.toml (why
it is harmless), else "unexplained": no survivor is explained by the shape of its change.
"""

from __future__ import annotations

import fnmatch
import re
import subprocess
import sys
from collections import Counter, defaultdict
from datetime import datetime, timezone
from pathlib import Path

from scaletrain.core.toml_text import parse_toml

REPO = Path(__file__).resolve().parents[1]
MUTMUT = [str(Path(sys.executable).with_name("mutmut"))]
REPORT = REPO / "docs" / "mutation-report.md"
REASONS = REPO / "scripts" / "mutation-reasons.toml"
# mutmut names a mutant <module>.x_<function>__mutmut_<n> or <module>.xǁ<Class>ǁ<method>...
MODULE = re.compile(r"^(?P<module>.+?)\.x[_ǁ]")


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


def change(name: str) -> tuple[str, str]:
    """The line a mutant removed and the one it added (stripped)."""
    diff = subprocess.run(
        [*MUTMUT, "show", name], cwd=REPO, capture_output=True, text=True, timeout=600
    ).stdout
    lines = diff.splitlines()
    removed = [line[1:].strip() for line in lines if line[:1] == "-" and line[:3] != "---"]
    added = [line[1:].strip() for line in lines if line[:1] == "+" and line[:3] != "+++"]
    return " ".join(removed), " ".join(added)


def reason_for(name: str, reasons: dict[str, str]) -> str | None:
    """The reason written for this mutant: its own name, or a pattern naming it among a few
    of one function read together (e.g. `..._mutmut_[46]`)."""
    return next(
        (why for pattern, why in reasons.items() if fnmatch.fnmatchcase(name, pattern)), None
    )


def tested_commit() -> str:
    """The commit whose code and tests the run used (the run keeps results across commits:
    a result is as old as the run that made it)."""
    return subprocess.run(
        ["git", "log", "-1", "--format=%h (%cs)"], cwd=REPO, capture_output=True, text=True
    ).stdout.strip()


def main() -> None:
    statuses = results()
    reasons: dict[str, str] = parse_toml(REASONS.read_text()) if REASONS.is_file() else {}
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
        "it stopped: results are kept in mutants/).",
        "",
        f"Run on the code and tests of commit {tested_commit()}.",
        "",
        "| module | mutants | killed | survived | timed out | no tests | not run | survival rate |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for module, counts in sorted(by_module.items()):
        tested = counts["killed"] + counts["survived"] + counts["timeout"]
        rate = f"{counts['survived'] / tested:.0%}" if tested else "-"
        lines.append(
            f"| `{module}` | {sum(counts.values())} | {counts['killed']} | {counts['survived']} | "
            f"{counts['timeout']} | {counts['no tests']} | {counts['not checked']} | {rate} |"
        )
    survivors = sorted(name for name, status in statuses.items() if status == "survived")
    explained = {name: reason_for(name, reasons) for name in survivors}
    unexplained = [name for name, reason in explained.items() if reason is None]
    lines += [
        "",
        f"## Survivors ({len(survivors)}, {len(unexplained)} unexplained)",
        "",
        "Each with why it is harmless, as read in the code (scripts/mutation-reasons.toml), or",
        "*unexplained*: a test to write.",
        "",
    ]
    for name in survivors:
        removed, added = change(name)
        lines += [f"- `{name}`: `{removed}` → `{added}`", f"  {explained[name] or '*unexplained*'}"]
    REPORT.write_text("\n".join(lines) + "\n")
    print(f"wrote {REPORT}")


if __name__ == "__main__":
    main()
