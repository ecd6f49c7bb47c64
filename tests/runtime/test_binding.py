"""st.init() binds each torchrun process to its GPU's cores where torchrun did not."""

from __future__ import annotations

import json
import subprocess
import sys

from scaletrain.clusters.catalog import load_profile
from scaletrain.runtime.binding import cores_for
from tests.conftest import clean_environ

LUMI = ",".join(load_profile("lumi", {}).node.cpu_masks)


def test_each_local_rank_gets_the_cores_of_its_gcd() -> None:
    node = set(range(64)) - {0, 8, 16, 24, 32, 40, 48, 56}  # LUMI: first core of each L3 reserved
    assert cores_for(0, LUMI, node) == set(range(49, 56))
    assert cores_for(4, LUMI, node) == set(range(1, 8))
    # Already bound as narrowly (torchrun --numa-binding, srun masks): left alone.
    assert cores_for(4, LUMI, set(range(1, 8))) is None
    assert cores_for(8, LUMI, node) is None  # no mask for a ninth process


def test_init_binds_a_torchrun_process_from_the_jobs_masks() -> None:
    environ = clean_environ(
        TORCHELASTIC_RUN_ID="t", RANK="0", LOCAL_RANK="1", WORLD_SIZE="1", LOCAL_WORLD_SIZE="2",
        MASTER_ADDR="127.0.0.1", SCALETRAIN_CPU_MASKS="0x1,0x2",
    )  # fmt: skip
    code = "import os, scaletrain as st; st.init(); print(sorted(os.sched_getaffinity(0)))"
    result = subprocess.run(
        [sys.executable, "-c", code],
        env=environ,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout.strip().splitlines()[-1]) == [1]
