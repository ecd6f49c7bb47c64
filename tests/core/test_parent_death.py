"""A process asks for a signal when its parent ends; if the parent it names has already
gone, the signal comes at once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's prctl")


def _run(parent: int) -> subprocess.CompletedProcess[str]:
    code = (
        "import signal; from scaletrain.core.parent_death import die_with_parent; "
        f"die_with_parent({parent}, sent=signal.SIGTERM); print('alive')"
    )
    return subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )


def test_a_process_whose_parent_is_the_one_it_names_lives_on() -> None:
    finished = _run(os.getpid())
    assert (finished.returncode, finished.stdout) == (0, "alive\n"), finished.stderr


def test_a_process_whose_named_parent_has_gone_gets_the_signal_at_once() -> None:
    # pid 1 stands for a parent that ended: this process's child is not init's.
    finished = _run(1)
    assert finished.returncode == -signal.SIGTERM, finished.stderr
    assert finished.stdout == ""
