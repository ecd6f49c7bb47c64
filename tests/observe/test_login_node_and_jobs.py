"""observe's parts on a login node (no torch), and in generated job scripts."""

from __future__ import annotations

import importlib.util
import subprocess
import sys

import pytest

from scaletrain.core import in_job_modules
from tests.support.job_scripts import launch_lines, plan_for, render


def test_monitor_analyze_and_the_study_report_need_no_torch() -> None:
    modules = ["scaletrain.cli.monitor", "scaletrain.cli.analyze", "scaletrain.cli.scale",
               "scaletrain.observe.monitor.sampler"]  # fmt: skip
    code = f"import sys; import {', '.join(modules)}; print('torch' in sys.modules)"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, check=True)  # fmt: skip
    assert result.stdout.strip() == "False"


def test_job_scripts_name_modules_that_exist() -> None:
    named = (in_job_modules.PREFLIGHT, in_job_modules.SAMPLER, in_job_modules.INSTRUMENT,
             in_job_modules.WATCHDOG)  # fmt: skip
    for module in named:
        assert importlib.util.find_spec(module) is not None, module


@pytest.mark.parametrize("mode", ["torchrun", "srun", "accelerate", "deepspeed", "lightning"])
def test_the_sampler_leaves_the_launch_line_as_it_was(mode: str) -> None:
    plan = plan_for(cluster="puhti", gpus=8, mode=mode)
    plain = launch_lines(render(plan, monitor_interval_s=None))[-1]
    monitored_script = render(plan)
    monitored = launch_lines(monitored_script)[-1]
    # The same command, run through the per-task code that starts the node's sampler.
    wrapper = 'bash -c "$in_task" task '
    assert monitored.replace(wrapper, "") == plain.replace(wrapper, "")
    # It watches "$$", the task's shell, which `exec` turns into the launcher.
    sampler = 'python3 -m scaletrain.observe.monitor.sampler --watch "$$" >/dev/null &'
    assert sampler in monitored_script
    # For training only: exported after the preflight, which runs the same per-task code.
    assert monitored_script.index("export SCALETRAIN_MONITOR_INTERVAL=2") > (
        monitored_script.index("scaletrain.diagnose.preflight")
    )


def test_a_profiled_job_runs_the_script_through_the_instrumented_entry() -> None:
    plan = plan_for(cluster="lumi", gpus=16, script_args=("--epochs", "10"))
    script = render(plan, instrument=(("SCALETRAIN_PROFILE", "0,8:5,2,3"),))
    assert "\nexport SCALETRAIN_PROFILE=0,8:5,2,3\n" in script
    assert launch_lines(script)[-1].endswith(
        "--module -- scaletrain.observe.profile.instrument train.py --epochs 10"
    )
