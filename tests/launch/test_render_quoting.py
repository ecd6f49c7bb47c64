"""Job scripts that shellcheck passes and hostile values cannot break: quoting, values
sbatch would misread, line breaks, negative options."""

from __future__ import annotations

import dataclasses
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from scaletrain.core.errors import ScaletrainError
from scaletrain.core.run_folder import RunFolder
from scaletrain.launch.shell_text import expandable, one_line
from scaletrain.planning.modes import launch_modes
from tests.support.job_scripts import launch_lines, plan_for, render, shellcheck

MODES = list(launch_modes())


def code_outside_single_quotes(script: str) -> str:
    """The script as bash reads it, less comments and single-quoted strings: where a value
    could run as code. Double-quoted text stays (bash expands $(...) inside it)."""
    kept, quote, index = [], None, 0
    while index < len(script):
        character = script[index]
        if quote == "'":
            quote = None if character == "'" else quote
        elif character == "\\":
            kept.append(script[index : index + 2])
            index += 1
        elif character == '"':
            quote = None if quote == '"' else '"'
            kept.append(character)
        elif quote is None and character == "'":
            quote = "'"
        elif quote is None and character == "#" and (index == 0 or script[index - 1] in " \n"):
            index = script.find("\n", index) - 1 if "\n" in script[index:] else len(script)
        else:
            kept.append(character)
        index += 1
    return "".join(kept)


@pytest.mark.skipif(
    shutil.which("shellcheck") is None,
    reason="shellcheck is not installed (sudo apt-get install -y shellcheck)",
)
@pytest.mark.parametrize("cluster", ["lumi", "puhti", "mahti", "local"])
def test_every_mode_and_shape_passes_shellcheck(cluster: str, tmp_path: Path) -> None:
    gpus_per_node = {"lumi": 8, "puhti": 4, "mahti": 4, "local": 4}[cluster]
    scripts = {}
    # The local test cluster has no container runtime; a site could have one.
    with_containers = cluster != "local"
    for mode in MODES:
        for nodes in (1, 2):
            for container in (None, "/appl/images/pytorch 2.5.sif")[: 1 + with_containers]:
                plan = plan_for(
                    cluster=cluster,
                    mode=mode,
                    nodes=nodes,
                    gpus_per_node=gpus_per_node,
                    container_image=container,
                    script_args=("--epochs", "3"),
                )
                software = "container" if container else "modules"
                scripts[f"{cluster}-{mode}-{nodes}-{software}"] = render(plan)
        scripts[f"{cluster}-{mode}-no-requeue"] = render(
            plan_for(cluster=cluster, mode=mode, gpus=1), requeue=False, preflight=False
        )
    scripts[f"{cluster}-no-watchdog"] = render(plan_for(cluster=cluster, gpus=1), hang_limit_s=0)
    # Everything else a job can have: your venv, extra options, commands before and after.
    scripts[f"{cluster}-extras"] = render(
        plan_for(cluster=cluster, gpus=gpus_per_node * 2, venv="/scratch/me/venv",
                 sbatch=("--exclusive",), launcher_args=("--log-dir=x y",), before=("cp a b",),
                 after=("cp b 'a c'",), extra_setup=("export X=1",),
                 environment={"HF_HOME": "/scratch/$USER/hf"}, expand=("HF_HOME",))
    )  # fmt: skip
    assert len(scripts) == (27 if with_containers else 17)
    assert shellcheck(scripts, tmp_path) == ""


def test_an_expandable_value_expands_variables_and_keeps_every_other_character() -> None:
    """What bash makes of `export NAME=<value>` for values marked to expand at job time."""
    values = {
        "/scratch/$USER/hf": "/scratch/me/hf",
        "${USER}-$(echo made)": "me-made",
        "a\\b \\\"c\" 'd' X": "a\\b \\\"c\" 'd' X",  # backslashes and quotes stay
        "trailing\\": "trailing\\",
    }
    for value, expected in values.items():
        program = f'export V={expandable(value)}; printf %s "$V"'
        result = subprocess.run(
            ["bash", "-c", program], capture_output=True, text=True, env={"USER": "me"}
        )
        assert (result.returncode, result.stdout) == (0, expected), (value, program)
    for broken in ("one\ntwo", "one\rtwo"):
        with pytest.raises(ScaletrainError, match="line break"):
            expandable(broken)


HOSTILE_ARGUMENTS = (
    "$(touch pwned1)",
    "`touch pwned2`",
    "'; touch pwned3; '",
    '"; touch pwned4; "',
    "line\ntouch pwned5",
    "$HOME/pwned6 && touch pwned7",
    "\\'pwned8",
)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    "container", [None, "/images/$(touch pwned9) it's.sif"], ids=["modules", "hostile-image"]
)
def test_hostile_values_stay_single_words(mode: str, container: str | None) -> None:
    plan = plan_for(
        cluster="lumi",
        mode=mode,
        gpus=16,
        script="my $(touch pwned10) `x`.py",
        script_args=HOSTILE_ARGUMENTS,
        container_image=container,
    )
    # A user's cluster profile may export any value (its [environment] table).
    hostile_export = "$(touch pwned14) `touch pwned15` it's"
    plan = dataclasses.replace(plan, environment={**plan.environment, "X": hostile_export})
    workdir = Path("/home/me/project 'pwned11' $(touch pwned12)")
    folder = RunFolder(workdir / "runs; touch pwned13" / "mnist")
    script = render(plan, folder=folder, workdir=workdir)
    # Every hostile value is inside single quotes: nowhere can bash run it.
    assert "pwned" not in code_outside_single_quotes(script)
    # ... and each reaches the command line as exactly one word.
    assert shlex.join([plan.script, *HOSTILE_ARGUMENTS]) + " &\ntraining=$!" in script
    assert f"cd {shlex.quote(str(workdir))} || exit 1" in script
    assert f"\nexport X={shlex.quote(hostile_export)}\n" in script
    assert f"run_dir={shlex.quote(str(folder.root))}" in script


@pytest.mark.parametrize(
    ("request_fields", "problem"),
    [
        ({"job_name": "x\ntouch pwned"}, "is not usable as a Slurm job name"),
        ({"job_name": "a b"}, "is not usable as a Slurm job name"),
        ({"account": "project_1 --wrap=touch"}, "cannot be written as an #SBATCH line"),
        ({"account": "p\n#SBATCH --x"}, "cannot be written as an #SBATCH line"),
    ],
)
def test_values_sbatch_would_misread_are_errors(
    request_fields: dict[str, str], problem: str
) -> None:
    plan = plan_for(cluster="puhti", gpus=4, **request_fields)
    with pytest.raises(ScaletrainError) as caught:
        render(plan)
    assert problem in caught.value.problem
    assert caught.value.hint.startswith(("choose a name such as", "remove spaces, quotes"))


@pytest.mark.parametrize("line_break", ["\n", "\r", "\x0b", "\x0c"])
def test_a_line_break_in_a_commented_value_is_an_error(line_break: str) -> None:
    # A comment ends at a line break: the rest would run as a command.
    with pytest.raises(ScaletrainError) as caught:
        one_line(f"lumi{line_break}touch pwned")
    assert "it contains a line break" in caught.value.problem
    assert caught.value.hint == "remove the line break from that name."
    assert one_line("Xeon cluster (2 × 8 GPUs)") == "Xeon cluster (2 × 8 GPUs)"


def test_variables_of_each_task_are_evaluated_in_the_task() -> None:
    for mode in MODES:
        script = render(plan_for(cluster="lumi", mode=mode, gpus=16))
        batch_shell_code = code_outside_single_quotes(script)
        for variable in ("SLURM_NODEID", "SLURM_LOCALID", "SLURM_PROCID"):
            assert f"${variable}" not in batch_shell_code, (mode, variable)
        # The per-task code runs first in every task, then the launcher.
        assert 'bash -c "$in_task" task' in launch_lines(script)[-1]
    accelerate = render(plan_for(cluster="puhti", mode="accelerate", gpus=8))
    launcher = 'exec python3 -m accelerate.commands.launch --machine_rank="$SLURM_NODEID" "$@"'
    assert launcher + "'" in accelerate


def test_job_options_refuse_negative_values() -> None:
    plan = plan_for(cluster="puhti", gpus=4)
    for option, value in (
        ("stop_margin_s", -1),
        ("max_requeues", -1),
        ("max_restarts", -1),
        ("hang_limit_s", -1),
    ):
        with pytest.raises(ScaletrainError) as caught:
            render(plan, **{option: value})
        name = {"stop_margin_s": "--stop-margin", "hang_limit_s": "--hang-limit"}.get(
            option, "--" + option.replace("_", "-")
        )
        assert caught.value.problem == f"{name} -1 is negative.", option
        assert caught.value.hint == f"give {name} 0 or more.", option
    # 0 is allowed: no requeue, no restart, no hang watchdog; a margin of 0 s stops at the limit.
    assert "#SBATCH --signal=B:USR1@0\n" in render(
        plan, stop_margin_s=0, max_requeues=0, max_restarts=0, hang_limit_s=0
    )
