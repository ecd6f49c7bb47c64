"""plan.toml: a plan written to a run folder loads back unchanged; damage is reported."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from scaletrain.clusters.catalog import load_profile
from scaletrain.core.errors import ScaletrainError
from scaletrain.core.run_folder import RunFolder
from scaletrain.core.toml_text import parse_toml
from scaletrain.launch.job_script import resource_options
from scaletrain.planning.extras import JobExtras
from scaletrain.planning.plan import read_plan, write_plan
from scaletrain.planning.planner import plan_job
from scaletrain.planning.request import Request


def lumi_plan():  # type: ignore[no-untyped-def]
    request = Request(
        cluster="lumi", script="train.py", script_args=("--lr", "0.1"), time="2:00:00", gpus=16,
        account="project_465000001", global_batch_size=256, job_name="big",
    )  # fmt: skip
    return plan_job(request, load_profile("lumi", {}))


def test_plan_round_trips_through_plan_toml(tmp_path: Path) -> None:
    folder = RunFolder(tmp_path / "runs" / "big").create()
    plan = lumi_plan()
    write_plan(plan, folder.plan)
    assert read_plan(folder.plan) == plan
    saved = parse_toml(folder.plan.read_text())
    assert saved["account"] == "project_465000001"
    assert resource_options(read_plan(folder.plan))[-1] == "--account=project_465000001"
    assert saved["environment"]["NCCL_SOCKET_IFNAME"] == "hsn0,hsn1,hsn2,hsn3"
    assert saved["billing"]["total_units"] == 16.0
    # 256 samples over 16 GPUs: 16 whole samples per GPU, written as a whole number.
    assert "\nper_gpu_batch_size = 16\n" in folder.plan.read_text()
    assert "memory_gb_per_node" in saved and "container_image" not in saved  # None is left out


def test_plan_without_optional_fields_round_trips(tmp_path: Path) -> None:
    plan = plan_job(
        Request(cluster="local", script="t.py", time="5", gpus=2), load_profile("local", {})
    )
    assert plan.billing is None and plan.memory_gb_per_node is None
    write_plan(plan, tmp_path / "plan.toml")
    assert read_plan(tmp_path / "plan.toml") == plan


HINT = (
    "move that file away (or choose another --name) to submit the run with a new plan; "
    "it was left as it is."
)


def test_a_shell_command_of_several_lines_stays_readable_in_plan_toml(tmp_path: Path) -> None:
    loop = "for f in a b; do\n  cp $f /tmp\ndone"
    request = Request(
        cluster="puhti", script="t.py", time="1:00:00", gpus=4, extras=JobExtras(before=(loop,))
    )
    plan = plan_job(request, load_profile("puhti", {}))
    write_plan(plan, tmp_path / "plan.toml")
    assert '"""\nfor f in a b; do\n  cp $f /tmp\ndone"""' in (tmp_path / "plan.toml").read_text()
    assert read_plan(tmp_path / "plan.toml") == plan


def test_damaged_plan_names_the_field_and_is_left_alone(tmp_path: Path) -> None:
    path = tmp_path / "plan.toml"
    write_plan(lumi_plan(), path)
    damaged = path.read_text().replace("nodes = 2\n", 'nodes = "two"\n')
    path.write_text(damaged)
    with pytest.raises(ScaletrainError) as caught:
        read_plan(path)
    assert caught.value.problem == (
        f"{path} is not a plan scaletrain can read: nodes: Input should be a valid integer, "
        "unable to parse string as an integer."
    )
    assert caught.value.hint == HINT
    assert path.read_text() == damaged


def test_a_plan_that_is_not_toml_or_not_text_is_named_with_what_to_do(tmp_path: Path) -> None:
    path = tmp_path / "plan.toml"
    path.write_text('nodes = "2\n')
    with pytest.raises(ScaletrainError) as caught:
        read_plan(path)
    assert caught.value.problem.startswith(f"{path} is not a plan scaletrain can read: ")
    assert "line 1" in caught.value.problem  # TOML's own account of where
    assert caught.value.hint == HINT
    path.write_bytes(b"nodes = 2\n\xff\n")
    with pytest.raises(ScaletrainError) as caught:
        read_plan(path)
    assert "is not UTF-8 text" in caught.value.problem
    assert caught.value.hint == HINT


_WRITE_IN_ASCII_LOCALE = """
import locale, sys
from test_plan_file import lumi_plan_with_args
from scaletrain.planning.plan import write_plan
write_plan(lumi_plan_with_args(), __import__("pathlib").Path(sys.argv[1]))
print(locale.getpreferredencoding(False))
"""


def lumi_plan_with_args():  # type: ignore[no-untyped-def]
    request = Request(
        cluster="lumi", script="train.py", script_args=("--title", "café × 2"), time="1:00:00",
        gpus=8,
    )  # fmt: skip
    return plan_job(request, load_profile("lumi", {}))


def test_plan_toml_is_utf8_whatever_the_login_nodes_locale(tmp_path: Path) -> None:
    # LANG=C without Python's UTF-8 coercion (a site's batch environment, an old container):
    # Python's default file encoding is then ASCII, and the plan holds "café × 2".
    path = tmp_path / "plan.toml"
    environ = {**os.environ, "LC_ALL": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0",
               "PYTHONPATH": os.pathsep.join([str(Path(__file__).parent), *sys.path])}  # fmt: skip
    written = subprocess.run(
        [sys.executable, "-c", _WRITE_IN_ASCII_LOCALE, str(path)],
        env=environ, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert written.returncode == 0, written.stderr
    assert written.stdout.strip() == "ANSI_X3.4-1968"  # the locale really was ASCII
    assert read_plan(path) == lumi_plan_with_args()
    assert "café × 2" in path.read_text(encoding="utf-8")
    # The same bytes as this process writes under its own (UTF-8) locale.
    here = tmp_path / "here.toml"
    write_plan(lumi_plan_with_args(), here)
    assert path.read_bytes() == here.read_bytes()
