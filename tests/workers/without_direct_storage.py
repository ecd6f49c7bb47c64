"""Run a worker script, or the `scaletrain` command (first argument `scaletrain`), with the
checkpoints' opt-in direct storage unimportable: any import of scaletrain.checkpoint.direct
raises ImportError. The default storage must never need it."""

from __future__ import annotations

import importlib.abc
import runpy
import sys
from collections.abc import Sequence
from types import ModuleType
from typing import Any

BLOCKED = "scaletrain.checkpoint.direct"


class _Blocked(importlib.abc.MetaPathFinder):
    def find_spec(
        self, name: str, path: Sequence[str] | None, target: ModuleType | None = None
    ) -> Any:
        if name == BLOCKED or name.startswith(f"{BLOCKED}."):
            raise ImportError(f"{name} is blocked by {__file__}")
        return None


sys.meta_path.insert(0, _Blocked())
what, sys.argv = sys.argv[1], sys.argv[1:]
if what == "scaletrain":
    from scaletrain.cli.start import main

    main()
else:
    runpy.run_path(what, run_name="__main__")
