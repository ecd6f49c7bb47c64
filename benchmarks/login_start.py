"""Benchmark: how fast the login-node commands start.

    python benchmarks/login_start.py [--label after]

Each run is kept under its label in results/login_start.json (other labels stay), so that a
measurement before a change and one after it sit side by side.

`scaletrain plan` (LUMI, 16 GPUs), `scaletrain clusters` and `scaletrain status` (on a run
folder this script makes with `scaletrain run --nproc 1`) run as subprocesses, in turn,
several times each. For each: wall time from start to exit, and the CPU time the process
used (user + system, from the kernel's accounting of ended children), which a loaded
machine inflates far less than the wall time. Then `python -X importtime` on the same
commands: the cumulative import time of everything scaletrain imported (from its first
module on: the interpreter's own start is not counted), and of `scaletrain.cli.app`. Where
valgrind is installed, also the instructions each command executes (callgrind, one run):
a count no other process changes, to compare versions on a busy machine. And which of the
large libraries (pydantic, jinja2, rich, typer) each command imports.

The cluster profiles validated by the first run are kept in the user's cache (as on a login
node after the first command); `cold_*` times `plan` and `clusters` with that cache emptied
before each run, the cost of a profile read for the first time.

The commands run as from an installed package: with Python's compiled modules (pip writes
them at install; here a warm-up run writes them into a folder of this script's own, through
PYTHONPYCACHEPREFIX, even where PYTHONDONTWRITEBYTECODE is set, which would compile every
scaletrain module from source at each start). The machine's load average is recorded before
and after: on a shared 2-core machine the wall times follow the load, the CPU times much
less so. The commit recorded is that of the scaletrain the commands import (another checkout
through PYTHONPATH measures that checkout).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import RESULTS, save, spread

REPEATS = 15
IMPORT_REPEATS = 5
COLD_REPEATS = 5
COLD_COMMANDS = ("plan", "clusters")
LIBRARIES = ("pydantic", "jinja2", "rich", "typer", "torch")
BIN = Path(sys.executable).parent
SCALETRAIN = str(BIN / "scaletrain")
COMMANDS = {
    "plan": ["plan", "-c", "lumi", "-g", "16", "-t", "2:00:00", "train.py"],
    "clusters": ["clusters"],
    "status": ["status", "login"],
}
# `python -X importtime` prints "import time: self [us] | cumulative | name", nested by indent.
_IMPORT_LINE = re.compile(r"import time:\s+\d+ \|\s+(\d+) \| (\s*)(\S+)")


def timed(command: list[str], folder: Path, environ: dict[str, str]) -> tuple[float, float]:
    """(wall s, CPU s) of one run of `command`."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, cwd=folder, env=environ, capture_output=True, check=True, timeout=120)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu


def import_times(arguments: list[str], folder: Path, environ: dict[str, str]) -> dict[str, float]:
    """Milliseconds of imports from scaletrain's first module on, and of scaletrain.cli.app."""
    code = "import sys; from scaletrain.cli.start import main; sys.argv[0] = 'scaletrain'; main()"
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", code, *arguments],
        cwd=folder, env=environ, capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    total_us, app_us, counting = 0, 0, False
    for line in result.stderr.splitlines():
        found = _IMPORT_LINE.match(line)
        if found is None:
            continue
        cumulative, indent, name = int(found[1]), found[2], found[3]
        counting = counting or name.startswith("scaletrain")
        if counting and not indent:  # a top-level import: its cumulative time holds the rest
            total_us += cumulative
        if name == "scaletrain.cli.app":
            app_us = cumulative
    return {"all_ms": total_us / 1000, "scaletrain.cli.app_ms": app_us / 1000}


def libraries(arguments: list[str], folder: Path, environ: dict[str, str]) -> list[str]:
    """Which of LIBRARIES one run of the command imports."""
    code = (
        "import sys\nfrom scaletrain.cli.start import main\nsys.argv[0] = 'scaletrain'\n"
        "try:\n    main()\nfinally:\n"
        "    print('imported:', *{name.partition('.')[0] for name in sys.modules}, file=sys.stderr)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code, *arguments],
        cwd=folder, env=environ, capture_output=True, text=True, check=True, timeout=120,
    )  # fmt: skip
    line = next(line for line in result.stderr.splitlines() if line.startswith("imported:"))
    return [name for name in LIBRARIES if name in line.split()[1:]]


def instructions(arguments: list[str], folder: Path, environ: dict[str, str]) -> float | None:
    """Millions of instructions one run executes (valgrind's callgrind), None without it."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        return None
    output = folder / "callgrind.out"
    subprocess.run(
        [valgrind, "--tool=callgrind", f"--callgrind-out-file={output}", SCALETRAIN,
         *arguments],
        cwd=folder, env=environ, capture_output=True, check=True, timeout=900,
    )  # fmt: skip
    summary = next(line for line in output.read_text().splitlines() if line.startswith("summary:"))
    return int(summary.split()[1]) / 1e6


def make_run(folder: Path, environ: dict[str, str]) -> None:
    """runs/login/: a finished local run (run.json, logs) for `scaletrain status`."""
    (folder / "done.py").write_text("print('done')\n", encoding="utf-8")
    subprocess.run(
        [SCALETRAIN, "run", "--nproc", "1", "--name", "login", "--monitor-interval", "0",
         "done.py"],
        cwd=folder, env=environ, capture_output=True, check=True, timeout=600,
    )  # fmt: skip


def commit() -> str:
    """The measured commit (of the scaletrain imported), `+changes` when its tree differs."""
    import scaletrain

    here = Path(scaletrain.__file__).resolve().parent

    def git(*arguments: str) -> str:
        return subprocess.run(
            ["git", *arguments], cwd=here, capture_output=True, text=True, check=False
        ).stdout.strip()

    changed = git("status", "--porcelain", "--", ".")
    return git("rev-parse", "--short", "HEAD") + ("+changes" if changed else "")


def machine_note(before: float, after: float, cpus: int) -> str:
    """The 1-minute load average around the run, and whether the machine was loaded."""
    busy = max(before, after) > cpus / 2
    state = "loaded: wall times are longer than an idle core's" if busy else "nearly idle"
    return f"load average {before:.1f} -> {after:.1f} (1 min) on {cpus} cores: {state}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--label", default="latest", help="name of this measurement")
    label = parser.parse_args().label
    load_before = os.getloadavg()
    with tempfile.TemporaryDirectory() as temporary:
        folder = Path(temporary)
        (folder / "train.py").write_text("import torch\n", encoding="utf-8")
        # No user profiles, no colour codes: the same commands every run; compiled modules
        # as an installed package has them, and a cache folder of the user's own.
        environ = {
            **os.environ,
            "XDG_CONFIG_HOME": str(folder / "config"),
            "XDG_CACHE_HOME": str(folder / "cache"),
            "NO_COLOR": "1",
            "PYTHONPYCACHEPREFIX": str(folder / "pycache"),
        }
        environ.pop("PYTHONDONTWRITEBYTECODE", None)
        make_run(folder, environ)
        for arguments in COMMANDS.values():  # writes the compiled modules (and caches)
            timed([SCALETRAIN, *arguments], folder, environ)
        wall: dict[str, list[float]] = {name: [] for name in COMMANDS}
        cpu: dict[str, list[float]] = {name: [] for name in COMMANDS}
        for repeat in range(REPEATS):
            names = list(COMMANDS)
            order = names[repeat % len(names) :] + names[: repeat % len(names)]
            for name in order:
                seconds, used = timed([SCALETRAIN, *COMMANDS[name]], folder, environ)
                wall[name].append(seconds)
                cpu[name].append(used)
        cold: dict[str, list[float]] = {name: [] for name in COLD_COMMANDS}
        for _ in range(COLD_REPEATS):
            for name in COLD_COMMANDS:
                shutil.rmtree(folder / "cache" / "scaletrain" / "profiles", ignore_errors=True)
                cold[name].append(timed([SCALETRAIN, *COMMANDS[name]], folder, environ)[1])
        imports = {name: {"all_ms": [], "scaletrain.cli.app_ms": []} for name in COMMANDS}
        for _ in range(IMPORT_REPEATS):
            for name, arguments in COMMANDS.items():
                for key, value in import_times(arguments, folder, environ).items():
                    imports[name][key].append(value)
        counted = {
            name: instructions(arguments, folder, environ) for name, arguments in COMMANDS.items()
        }
        imported = {
            name: libraries(arguments, folder, environ) for name, arguments in COMMANDS.items()
        }
    load_after = os.getloadavg()
    cpus = os.cpu_count() or 1
    record = {
        "commit": commit(),
        "machine": machine_note(load_before[0], load_after[0], cpus),
        "commands": {
            name: " ".join(["scaletrain", *arguments]) for name, arguments in COMMANDS.items()
        },
        "load_average_1_5_15_min": {"before": load_before, "after": load_after},
        "cpus": cpus,
        "wall_s": {name: spread(values) for name, values in wall.items()},
        "cpu_s": {name: spread(values) for name, values in cpu.items()},
        "cold_cpu_s": {name: spread(values) for name, values in cold.items()},
        "instructions_millions": counted,
        "libraries_imported": imported,
        "import_ms": {
            name: {key: spread(values) for key, values in found.items()}
            for name, found in imports.items()
        },
        "raw": {"wall_s": wall, "cpu_s": cpu, "cold_cpu_s": cold},
    }
    for name in COMMANDS:
        print(
            f"{name}: wall {record['wall_s'][name]['median']:.3f} s, "
            f"CPU {record['cpu_s'][name]['median']:.3f} s, {counted[name]} M instructions, imports "
            f"{record['import_ms'][name]['all_ms']['median']:.0f} ms; {', '.join(imported[name])}",
            file=sys.stderr,
        )
    print(f"load average before {load_before}, after {load_after}", file=sys.stderr)
    path = RESULTS / "login_start.json"
    runs = json.loads(path.read_text())["runs"] if path.exists() else {}
    runs[label] = record
    print(
        f"saved {save('login_start', {'benchmark': 'login_start', 'runs': runs})}", file=sys.stderr
    )


if __name__ == "__main__":
    main()
