"""Job scripts rendered from plans: what each line does, shellcheck, quoting of hostile values."""

from __future__ import annotations

import dataclasses
import re
import shlex
import shutil
from importlib.resources import files
from pathlib import Path

import pytest

from scaletrain.core.errors import ScaletrainError
from scaletrain.core.run_folder import RunFolder
from scaletrain.launch.shell_text import one_line
from scaletrain.planning.modes import launch_modes
from tests.conftest import REPO
from tests.support.doc_samples import blocks
from tests.support.golden_jobs import GOLDEN_JOBS, expected_script, golden_file
from tests.support.job_scripts import launch_lines, plan_for, render, shellcheck

MODES = list(launch_modes())
# The cores nearest GCD 0..7 on LUMI (seed 003), as in the lumi profile.
LUMI_MASKS = ",".join(
    [
        *("0xfe000000000000", "0xfe00000000000000", "0xfe0000", "0xfe000000"),
        *("0xfe", "0xfe00", "0xfe00000000", "0xfe0000000000"),
    ]
)


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


def test_every_launch_mode_has_a_template_of_its_name() -> None:
    templates = files("scaletrain.launch") / "templates"
    names = {path.name.removesuffix(".sbatch.j2") for path in templates.iterdir()}
    # job.sbatch.j2 is the skeleton around them, common.j2 their shared pieces, hang.j2 the
    # hang watchdog's.
    assert names - {"job", "common.j2", "hang.j2"} == set(MODES)


@pytest.mark.skipif(
    shutil.which("shellcheck") is None,
    reason="shellcheck is not installed (sudo apt-get install -y shellcheck)",
)
@pytest.mark.parametrize("cluster", ["lumi", "puhti", "mahti", "local"])
def test_every_mode_and_shape_passes_shellcheck(cluster: str, tmp_path: Path) -> None:
    gpus_per_node = {"lumi": 8, "puhti": 4, "mahti": 4, "local": 4}[cluster]
    scripts = {}
    for mode in MODES:
        for nodes in (1, 2):
            for container in (None, "/appl/images/pytorch 2.5.sif"):
                plan = plan_for(
                    cluster=cluster,
                    mode=mode,
                    nodes=nodes,
                    gpus_per_node=gpus_per_node,
                    container_image=container,
                    script_args=("--epochs", "3"),
                )
                if container and not plan.container_command:
                    # The local test cluster has no container runtime; a site could have one.
                    plan = dataclasses.replace(plan, container_command="apptainer exec")
                software = "container" if container else "modules"
                scripts[f"{cluster}-{mode}-{nodes}-{software}"] = render(plan)
        scripts[f"{cluster}-{mode}-no-requeue"] = render(
            plan_for(cluster=cluster, mode=mode, gpus=1), requeue=False, preflight=False
        )
    scripts[f"{cluster}-no-watchdog"] = render(plan_for(cluster=cluster, gpus=1), hang_limit_s=0)
    assert len(scripts) == 26
    assert shellcheck(scripts, tmp_path) == ""


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
            assert variable not in batch_shell_code, (mode, variable)
        # The per-task code runs first in every task, then the launcher.
        assert 'bash -c "$in_task" task' in launch_lines(script)[-1]
    accelerate = render(plan_for(cluster="puhti", mode="accelerate", gpus=8))
    assert """exec accelerate launch --machine_rank="$SLURM_NODEID" "$@"'""" in accelerate


def test_lumi_cpu_binding_and_gcd_visibility_per_mode() -> None:
    for mode in MODES:
        script = render(plan_for(cluster="lumi", mode=mode, gpus=16))
        training = launch_lines(script)[-1]
        per_gpu = mode in ("srun", "deepspeed", "lightning")
        # One task per GPU: each bound to the 7 cores nearest its GCD, in GCD order (003).
        assert (f"--cpu-bind=mask_cpu:{LUMI_MASKS}" in training) is per_gpu
        # Only srun mode narrows each task to its own GCD; the others pick cuda:<local rank>.
        assert ("export ROCR_VISIBLE_DEVICES=$SLURM_LOCALID" in script) is (mode == "srun")
        assert 'export MIOPEN_USER_DB_PATH="/tmp/$USER-miopen-cache-$SLURM_NODEID"' in script
        for line in ("NCCL_SOCKET_IFNAME=hsn0,hsn1,hsn2,hsn3", "NCCL_NET_GDR_LEVEL=PHB"):
            assert f"\nexport {line}\n" in script
        assert "\nexport OMP_NUM_THREADS=7\n" in script
    # Part of a node: the cores are Slurm's choice, so no masks are forced on them.
    partial = render(plan_for(cluster="lumi", mode="srun", gpus=2))
    assert "--cpu-bind" not in partial and "ROCR_VISIBLE_DEVICES" in partial
    nvidia = render(plan_for(cluster="puhti", mode="srun", gpus=8), monitor_interval_s=None)
    assert "MIOPEN" not in nvidia and "VISIBLE_DEVICES" not in nvidia and "in_task" not in nvidia


def test_container_or_modules() -> None:
    modules = render(plan_for(cluster="lumi", gpus=16))
    assert "module use /appl/local/csc/modulefiles\nmodule load pytorch\n" in modules
    assert "CONTAINER" not in modules
    image = "/project/images/pytorch.sif"
    container = render(plan_for(cluster="lumi", gpus=16, container_image=image))
    assert "\nmodule " not in container
    assert f"CONTAINER={image}\n" in container
    assert "export SINGULARITY_BIND=/scratch/project_465000000/me\n" in container
    assert len(launch_lines(container)) == 2  # the preflight and training
    for line in launch_lines(container):
        assert line.startswith('srun --kill-on-bad-exit=1 singularity exec "$CONTAINER" bash -c')
    # MASTER_ADDR comes from scontrol in the batch shell: containers have no scontrol.
    batch = container.index("MASTER_ADDR=$(scontrol show hostnames")
    assert batch < container.index("\nsrun ")


def test_a_container_needs_a_command_and_plain_folders(tmp_path: Path) -> None:
    with pytest.raises(ScaletrainError, match="names no command to run a container image"):
        render(plan_for(cluster="local", gpus=2, container_image="pytorch.sif"))
    elsewhere = RunFolder(Path("/scratch/a,b/runs/mnist"))
    with pytest.raises(ScaletrainError, match="cannot be bound into a container"):
        render(plan_for(cluster="lumi", gpus=8, container_image="x.sif"), folder=elsewhere)


def test_requeue_and_graceful_stop_lines() -> None:
    script = render(plan_for(cluster="puhti", gpus=8, time="2:00:00"))
    for line in (
        "#SBATCH --output=logs/%x-%j.out",
        "#SBATCH --open-mode=append",
        "#SBATCH --signal=B:USR1@300",
        "#SBATCH --requeue",
        "trap '",
        'touch "$run_dir/stop-requested"\' USR1',
        "if ((restarts < 3)); then",
        'scontrol requeue "$SLURM_JOB_ID"',
        '>>"$run_dir/jobs.jsonl"',
    ):
        assert line in script
    # Training runs in the background so that the trap can run while bash waits.
    joined = re.sub(r" \\\n\s*", " ", script)
    assert launch_lines(script)[-1] + " &\ntraining=$!\n" in joined
    assert joined.index('wait "$training"') > joined.index("training=$!")
    short = render(plan_for(cluster="puhti", gpus=8, time="10:00"), max_requeues=5)
    assert "#SBATCH --signal=B:USR1@120" in short and "((restarts < 5))" in short
    never = render(plan_for(cluster="puhti", gpus=8), requeue=False)
    assert "--requeue" not in never and "scontrol requeue" not in never
    assert "requeuehold" not in never and "sbatch --parsable" not in never
    assert "#SBATCH --signal=B:USR1@300" in never  # still checkpoints before the limit
    with pytest.raises(ScaletrainError, match="not shorter than the time limit"):
        render(plan_for(cluster="puhti", gpus=8, time="10:00"), stop_margin_s=600)


def test_hang_watchdog_lines() -> None:
    script = render(plan_for(cluster="lumi", gpus=16, container_image="/x/pytorch.sif"))
    joined = re.sub(r" \\\n\s*", " ", script)
    # Beside the training step, in the container (where scaletrain is), told the limit.
    assert (
        'singularity exec "$CONTAINER" python3 -u -m scaletrain.launch.watchdog '
        '--run-dir "$run_dir" --hang-limit 300 --step-pid "$training" &\nwatchdog=$!'
    ) in joined
    assert "export SCALETRAIN_HANG_LIMIT=300" in script  # the ranks pace their heartbeats
    # Its status 75 requeues without the blamed nodes, held until they are excluded.
    assert "if ((watchdog_status == 75)); then" in script
    for line in (
        'scontrol requeuehold "$SLURM_JOB_ID"',
        'scontrol update JobId="$SLURM_JOB_ID" ExcNodeList="$exclude"',
        'scontrol release "$SLURM_JOB_ID" && exit 0',
        "if ((requeues < 3)); then",
    ):
        assert line in script
    # A requeue that Slurm did itself (NODE_FAIL) is recorded when the job starts again.
    assert '"by\\": \\"slurm\\"' in script and "DUE TO" in script
    no_requeue = render(plan_for(cluster="lumi", gpus=16), requeue=False, hang_limit_s=45)
    assert "--hang-limit 45" in no_requeue and "requeuehold" not in no_requeue
    assert "training hung; not requeued (--no-requeue)" in no_requeue
    off = render(plan_for(cluster="lumi", gpus=16), hang_limit_s=0)
    assert "scaletrain.launch.watchdog" not in off and "watchdog_status" not in off
    assert "export SCALETRAIN_HANG_LIMIT=0" in off  # no heartbeats either
    with pytest.raises(ScaletrainError, match="--hang-limit -1 is negative"):
        render(plan_for(cluster="lumi", gpus=16), hang_limit_s=-1)


def test_torchrun_restarts_and_rendezvous() -> None:
    one_node = launch_lines(render(plan_for(cluster="puhti", gpus=4)))[-1]
    assert "torchrun --standalone --nnodes=1 --nproc_per_node=4 --max_restarts=3 -- train.py" in (
        one_node
    )
    script = render(plan_for(cluster="puhti", gpus=8), max_restarts=1)
    assert "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000))" in script
    assert (
        '--rdzv_endpoint="$MASTER_ADDR:$MASTER_PORT" --max_restarts=1 -- train.py'
        in (launch_lines(script)[-1])
    )


@pytest.mark.parametrize("name", sorted(GOLDEN_JOBS))
def test_example_scripts_are_as_documented(name: str) -> None:
    """tests/fixtures/jobs/*.sbatch are quoted in docs/slurm-jobs.md. This test only compares;
    after a deliberate change, `python -m tests.support.golden_jobs` writes them anew."""
    golden = golden_file(name)
    assert golden.is_file(), f"{golden} is missing: python -m tests.support.golden_jobs"
    assert expected_script(name) == golden.read_text(), (
        f"the {name} job script differs from {golden}; if the change is deliberate, run "
        "`.venv/bin/python -m tests.support.golden_jobs` and read the diff"
    )


@pytest.mark.parametrize("name", sorted(GOLDEN_JOBS))
def test_the_documented_excerpts_are_from_the_example_scripts(name: str) -> None:
    docs = REPO / "docs" / "slurm-jobs.md"
    mention = docs.read_text().split(f"`tests/fixtures/jobs/{name}.sbatch`")[0].count("\n") + 1
    excerpt = next(block for block in blocks(docs) if block.line > mention)
    quoted = [line for line in excerpt.lines if line != "…"]
    assert len(quoted) > 10, f"no excerpt of {name} found in docs/slurm-jobs.md"
    lines = iter(golden_file(name).read_text().splitlines())
    # Each line of the excerpt is in the script, in the same order ("…" marks a cut).
    missing = [line for line in quoted if line not in lines]
    assert not missing, f"{name}: not in the script (or out of order): {missing[:3]}"
