"""Shared pieces of the fuzz tests (hypothesis): a bounded budget and hostile values.

The budget keeps every fuzz test to seconds on a loaded 2-core machine, and the examples are
the same on every machine (seeds derived from the test names). SCALETRAIN_FUZZ_EXAMPLES=2000
searches longer, with new random examples each time. No example database is written: a
failure prints the example that caused it.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

EXAMPLES = int(os.environ.get("SCALETRAIN_FUZZ_EXAMPLES", "60"))
SEARCHING = "SCALETRAIN_FUZZ_EXAMPLES" in os.environ

FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    database=None,
    derandomize=not SEARCHING,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)

# Text that has broken command lines before: markup, shell, line breaks, separators, names
# of files and options, numbers at and beyond their limits, Slurm's time spellings.
HOSTILE_WORDS = (
    "",
    " ",
    "-",
    "--",
    "---",
    "-h",
    "--help",
    "--json",
    "--dry-run",
    "[bold]x",
    "[/]",
    "[",
    "scaletrain[torch]",
    "$(id)",
    "`id`",
    "a;b",
    "a b",
    "a\nb",
    "a\rb",
    "#SBATCH --uid=0",
    "\x00",
    "\x1b[31m",
    "ünï",
    "\udcff",
    "../..",
    "/",
    ".",
    "..",
    "/proc/x",
    "/dev/null",
    "afile",
    "runs",
    "runs/r",
    "train.py",
    "missing.py",
    "lumi",
    "puhti",
    "mahti",
    "local",
    "small-g",
    "standard-g",
    "gpu",
    "0",
    "1",
    "2",
    "8",
    "16",
    "-1",
    "4294967296",
    "1e3",
    "999999999999999999999",
    "1:00",
    "1:00:00",
    "30",
    "0:00",
    "1-00:00:00",
    "3-",
    "nan",
    "{gpus}",
    "{model}",
    "%x",
    "%j",
    "'",
    '"',
    "\\",
    "*",
    "?",
    "~",
)

hostile_text = st.one_of(
    st.sampled_from(HOSTILE_WORDS),
    st.text(max_size=20),
    st.integers(min_value=-(10**20), max_value=10**20).map(str),
)
