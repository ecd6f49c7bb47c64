"""resumable.py with its checkpoints on the storage `--storage NAME` names (default "dcp"):
the checkpoint tests run the same training on each storage. It wraps resumable.py, shared
with the launch tests, rather than changing it: st.Checkpointer is given the storage."""

from __future__ import annotations

import argparse
import functools
import runpy
import sys
from pathlib import Path

import scaletrain as st

RESUMABLE = Path(__file__).with_name("resumable.py")

parser = argparse.ArgumentParser(add_help=False)
parser.add_argument("--storage", default="dcp")
chosen, rest = parser.parse_known_args()
st.Checkpointer = functools.partial(st.Checkpointer, storage=chosen.storage)  # type: ignore[misc]
sys.argv = [str(RESUMABLE), *rest]
runpy.run_path(str(RESUMABLE), run_name="__main__")
