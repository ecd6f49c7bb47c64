"""Scripts with st.loader's workers: they end when they end, and a wrong shape is named.

The workers ignore SIGTERM (so that scancel does not crash a rank before it saves), and
multiprocessing ends daemonic children at exit with SIGTERM and then waits for them: a
loader still alive at exit used to hang the process forever. The workers come from a
forkserver, which imports the script: one without the main guard used to fail with
"DataLoader worker exited unexpectedly" only. Real scripts, real workers.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.conftest import PROCESS_TIMEOUT_S, clean_environ, kill_session

pytestmark = pytest.mark.multiprocess

PREAMBLE = """
import torch
from torch.utils.data import TensorDataset
import scaletrain as st
"""
# The README's shape: everything at the top level (under the main guard, which the loader's
# forkserver needs), ending with st.shutdown(); the loader is still alive at exit.
GLOBAL_LOADER = """
if __name__ == "__main__":
    st.init()
    loader = st.loader(TensorDataset(torch.arange(64.0)), global_batch_size=8, num_workers=1)
    total = sum(float(batch[0].sum()) for batch in loader)
    print(f"trained: {total:g}", flush=True)
    st.shutdown()
"""
# A bug in the loop: the traceback's frames keep the iterator and its worker alive at exit.
CRASH_IN_LOOP = """
def main():
    st.init()
    loader = st.loader(TensorDataset(torch.arange(64.0)), global_batch_size=8, num_workers=1)
    for batch in loader:
        raise ValueError("a bug in the training step")

if __name__ == "__main__":
    main()
"""

# What a user converting a top-level script by the README's snippet may write: no guard.
NO_MAIN_GUARD = """
st.init()
loader = st.loader(TensorDataset(torch.arange(64.0)), global_batch_size=8, num_workers=1)
print(f"trained: {sum(float(batch[0].sum()) for batch in loader):g}", flush=True)
"""


def run_script(folder: Path, body: str) -> subprocess.CompletedProcess[str]:
    script = folder / "train.py"
    script.write_text(textwrap.dedent(PREAMBLE + body), encoding="utf-8")
    process = subprocess.Popen(
        [sys.executable, str(script)],
        cwd=folder,
        env=clean_environ(),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = process.communicate(timeout=PROCESS_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the script did not exit within {PROCESS_TIMEOUT_S} s: it hung at exit")
    finally:
        kill_session(process)
    return subprocess.CompletedProcess(process.args, process.returncode, output)


def test_a_script_whose_loader_is_alive_at_exit_exits_with_success(tmp_path: Path) -> None:
    finished = run_script(tmp_path, GLOBAL_LOADER)
    assert "trained: 2016" in finished.stdout
    assert finished.returncode == 0, finished.stdout


def test_a_script_that_crashes_inside_the_loop_exits_with_its_error(tmp_path: Path) -> None:
    finished = run_script(tmp_path, CRASH_IN_LOOP)
    assert finished.returncode == 1, finished.stdout
    assert "ValueError: a bug in the training step" in finished.stdout


def test_a_script_without_the_main_guard_is_told_to_add_it(tmp_path: Path) -> None:
    finished = run_script(tmp_path, NO_MAIN_GUARD)
    assert finished.returncode == 1, finished.stdout
    assert "st.init() ran in a child process while it imported your script" in finished.stdout
    assert 'HINT: put the training under `if __name__ == "__main__":`' in finished.stdout
