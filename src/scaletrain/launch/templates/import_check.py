# Runs in the job's Python with words KIND:NAME as arguments; standard library only, so that
# it can say what is missing even where scaletrain is (scaletrain/launch/environment_check.py).
# need:NAME   the job cannot run without it: exit 1 when missing.
# maybe:NAME  your script imports it, but it may be a module of yours that the script finds
#             through sys.path: a warning when missing.
# tool:NAME   scaletrain's own checks need it: exit 3 when missing (they are left out).
# path:DIR    searched first, as Python searches the script's own folder.
# tested:A:B  the torch releases scaletrain is tested with, A to B (major.minor): a
#             warning naming the job's torch outside them.
import importlib.metadata
import importlib.util
import sys

words = [word.partition(":")[::2] for word in sys.argv[1:]]
sys.path[:0] = [name for kind, name in words if kind == "path"]
missing = {
    kind: [n for k, n in words if k == kind and importlib.util.find_spec(n) is None]
    for kind in ("need", "maybe", "tool")
}
python = f"the job's Python ({sys.executable})"
for kind, tested in words:
    if kind == "tested" and importlib.util.find_spec("torch") is not None:
        oldest, newest = (tuple(int(n) for n in end.split(".")) for end in tested.split(":"))
        version = importlib.metadata.version("torch")
        found = tuple(int(n) if n.isdigit() else 0 for n in version.split("+")[0].split(".")[:2])
        if not oldest <= found <= newest:
            print(
                f"scaletrain: warning: {python} has torch {version}; scaletrain is tested with "
                f"torch {tested.replace(':', ' to ')} (checkpoints and strategies may fail).",
                file=sys.stderr,
            )
if missing["maybe"]:
    print(
        f"scaletrain: warning: {python} cannot import {', '.join(missing['maybe'])}: fine if "
        "your script adds its own folder to sys.path; if it is a package, install it.",
        file=sys.stderr,
    )
if missing["need"]:
    print(f"scaletrain: {python} cannot import {', '.join(missing['need'])}.", file=sys.stderr)
    sys.exit(1)
if missing["tool"]:
    print(
        f"scaletrain: {python} has no {', '.join(missing['tool'])}: your script trains without "
        "the preflight, the GPU monitor and the hang watchdog.",
        file=sys.stderr,
    )
    sys.exit(3)
