# Runs in the job's Python with module names as arguments; standard library only, so that it
# can say what is missing even when scaletrain is (scaletrain/launch/environment_check.py).
import importlib.util
import sys

missing = [name for name in sys.argv[1:] if importlib.util.find_spec(name) is None]
if missing:
    print(
        f"scaletrain: the job's Python ({sys.executable}) cannot import {', '.join(missing)}.",
        file=sys.stderr,
    )
    sys.exit(1)
