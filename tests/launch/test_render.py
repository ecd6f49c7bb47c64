"""Job scripts rendered from plans: what each line does, shellcheck, quoting of hostile values."""

from __future__ import annotations

import dataclasses
import re
import shlex
import shutil
import subprocess
from importlib.resources import files
from pathlib import Path
from typing import Any

import pytest

from scaletrain.core.errors import ScaletrainError
from scaletrain.core.run_folder import RunFolder
from scaletrain.launch.job_script import render_environment_check
from scaletrain.launch.shell_text import expandable, one_line
from scaletrain.planning.memory import ModelSize
from scaletrain.planning.modes import launch_modes
from tests.conftest import REPO
from tests.support.doc_samples import blocks
from tests.support.golden_jobs import GOLDEN_JOBS, expected_script, golden_file
from tests.support.job_scripts import WORKDIR, launch_lines, plan_for, render, shellcheck

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
    # hang watchdog's, rehearsal.j2 a rehearsal's, import_check.py the job's check of its
    # Python, rendezvous_store.py the store of multi-node launches, job_functions.sh the
    # batch shell's functions, environment_check.sh.j2 the check on a login node.
    others = {"job", "common.j2", "hang.j2", "import_check.py", "rendezvous_store.py"}
    others |= {"rehearsal.j2", "environment_check.sh.j2", "job_functions.sh"}
    assert names - others == set(MODES)


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


def test_lumi_cpu_binding_and_gcd_visibility_per_mode() -> None:
    for mode in MODES:
        script = render(plan_for(cluster="lumi", mode=mode, gpus=16))
        training = launch_lines(script)[-1]
        per_gpu = mode in ("srun", "deepspeed", "lightning")
        # One task per GPU: each bound to the 7 cores nearest its GCD, in GCD order (003).
        assert (f"--cpu-bind=mask_cpu:{LUMI_MASKS}" in training) is per_gpu
        # Every task sees every GCD of its node: a script picks cuda:<local rank> (see
        # test_each_task_sees_the_gpus_its_script_expects for scripts that use cuda:0).
        assert "VISIBLE_DEVICES" not in script
        assert 'export MIOPEN_USER_DB_PATH="/tmp/$USER-miopen-cache-$SLURM_NODEID"' in script
        for line in ("NCCL_SOCKET_IFNAME=hsn0,hsn1,hsn2,hsn3", "FI_MR_CACHE_MONITOR=userfaultfd"):
            assert f"\nexport {line}\n" in script
        # GDR level PHB hangs multi-node start-up on ROCm 7 containers (LUMI-AI-Guide #97).
        assert "NCCL_NET_GDR_LEVEL" not in script
        # A process's 7 cores under srun; 1 where torchrun or accelerate start the node's
        # processes, as torchrun does by itself and LUMI's images keep: cores for workers.
        threads = 7 if per_gpu else 1
        assert f"\nexport OMP_NUM_THREADS={threads}\n" in script
        # A missing RCCL network plugin fails the preflight instead of a warning.
        assert "\nexport SCALETRAIN_EXPECT_NET_PLUGIN=1\n" in script
        # torchrun binds each process to its GCD's NUMA node where torch can, else st.init().
        numa = '"${numa_binding[@]}"' in training
        assert numa is (mode == "torchrun")
        assert ("SCALETRAIN_CPU_MASKS=" in script) is (mode in ("torchrun", "accelerate"))
    # Part of a node: the cores are Slurm's choice, so no masks are forced on them.
    partial = render(plan_for(cluster="lumi", mode="srun", gpus=2))
    assert "--cpu-bind" not in partial
    nvidia = render(plan_for(cluster="puhti", mode="srun", gpus=8), monitor_interval_s=None)
    assert "MIOPEN" not in nvidia and "VISIBLE_DEVICES" not in nvidia
    # A full node of small-g is held alone: LUMI's masks work with --exclusive only.
    small = render(plan_for(cluster="lumi", mode="srun", gpus=8, partition="small-g"))
    assert "#SBATCH --exclusive\n" in small and f"mask_cpu:{LUMI_MASKS}" in small


def test_lumi_runs_the_laif_container_with_its_bindings_and_extends_them() -> None:
    container = render(plan_for(cluster="lumi", gpus=16))
    for line in (
        "module use /appl/local/laifs/modules",
        "module load lumi-aif-singularity-bindings",
    ):
        # A setup line that fails stops the job, saying which.
        assert f"\n{line} || {{ echo 'scaletrain: the software setup failed" in container
    assert "CONTAINER=/appl/local/laifs/containers/lumi-multitorch-latest.sif\n" in container
    # The bindings module's SINGULARITY_BIND is extended, never replaced.
    assert "binds=/scratch/project_465000000/me\n" in container
    assert 'export SINGULARITY_BIND="${SINGULARITY_BIND:+$SINGULARITY_BIND,}$binds"' in container
    assert len(launch_lines(container)) == 2  # the preflight and training
    for line in launch_lines(container):
        assert line.startswith('srun --kill-on-bad-exit=1 singularity run "$CONTAINER" bash -c')
    # MASTER_ADDR comes from scontrol in the batch shell: containers have no scontrol.
    batch = container.index("MASTER_ADDR=$(scontrol show hostnames")
    assert batch < container.index("\nsrun ")
    # The job's Python is checked inside the container, where training runs.
    assert (
        '\nsingularity run "$CONTAINER" python3 - need:torch tool:scaletrain tested:2.7:2.15 '
        '<"$run_dir/programs/import_check.py"\n' in container
    )
    # Caches on /scratch, expanded when the job runs (LUMI-AI-Guide).
    assert 'export TORCH_HOME="/scratch/$SLURM_JOB_ACCOUNT/$USER/torch-cache"' in container


def test_a_venv_or_squashfs_inside_the_container_comes_first_on_its_path() -> None:
    venv = render(plan_for(cluster="lumi", gpus=16, venv="/project/project_465000000/venv"))
    assert "binds=/scratch/project_465000000/me,/project/project_465000000/venv\n" in venv
    assert "export SINGULARITYENV_PREPEND_PATH=/project/project_465000000/venv/bin\n" in venv
    squashfs = render(plan_for(cluster="lumi", gpus=16, squashfs="/scratch/p/env.sqsh"))
    assert "binds=/scratch/project_465000000/me,/scratch/p/env.sqsh:/user-software:image-src=/" in (
        squashfs
    )
    assert "export SINGULARITYENV_PREPEND_PATH=/user-software/bin\n" in squashfs
    # An own image on Puhti runs with apptainer, whose variables are APPTAINER_*.
    own = render(plan_for(cluster="puhti", gpus=4, container_image="/scratch/p/t.sif"))
    assert 'export APPTAINER_BIND="${APPTAINER_BIND:+$APPTAINER_BIND,}$binds"' in own
    assert 'apptainer exec "$CONTAINER" python3 -' in own


def test_a_venv_over_a_module_is_activated_after_the_load() -> None:
    script = render(plan_for(cluster="puhti", gpus=8, venv="/projappl/p/venv"))
    load = script.index("module load pytorch || ")
    activate = script.index('source "$venv/bin/activate"')
    check = script.index("python3 - need:torch tool:scaletrain tested:2.7:2.15 <")
    assert load < activate < check < script.index("\nsrun ")
    assert "venv=/projappl/p/venv\n" in script
    # The venv scaletrain runs from is the default, outside containers only.
    submitted = plan_for(cluster="puhti", gpus=8, submitting_venv="/users/me/venv")
    assert submitted.software.venv == "/users/me/venv"
    laif = plan_for(cluster="lumi", gpus=8, submitting_venv="/users/me/venv")
    assert laif.software.venv is None
    assert (
        plan_for(cluster="puhti", gpus=8, venv="none", submitting_venv="/v").software.venv is None
    )
    modules = render(plan_for(cluster="lumi", gpus=16, stack="csc"))
    assert "\nmodule use /appl/local/csc/modulefiles || " in modules
    assert "CONTAINER" not in modules


def test_software_choices_that_cannot_work_are_errors(tmp_path: Path) -> None:
    def refusal(**request: Any) -> ScaletrainError:
        with pytest.raises(ScaletrainError) as caught:
            render(plan_for(**request))
        return caught.value

    no_runtime = refusal(cluster="local", gpus=2, stack="pytorch", container_image="pytorch.sif")
    assert no_runtime.problem == (
        "--container needs a stack that runs containers, and local's stack 'pytorch' does not."
    )
    assert no_runtime.hint == (
        "add a stack with container_command (e.g. 'apptainer exec') to the profile, or leave "
        "out --container."
    )
    # Puhti's default stack is a module: nothing to mount a squashfs venv or a folder into.
    for option, request in (
        ("--squashfs", {"squashfs": "env.sqsh"}),
        ("--bind", {"binds": ("/d",)}),
    ):
        no_container = refusal(cluster="puhti", gpus=2, **request)
        assert no_container.problem == (
            f"{option} mounts into a container, but the job runs without one (stack 'pytorch')."
        )
        assert no_container.hint == (
            "add --container IMAGE (or a stack with an image), or use --venv for a venv over a "
            "module."
        )
    both = refusal(cluster="lumi", gpus=8, squashfs="env.sqsh", venv="/project/p/venv")
    assert both.problem == "--squashfs and --venv both name your packages."
    assert both.hint == (
        "give one: --squashfs venv.sqsh (the venv packed with mksquashfs) or --venv FOLDER."
    )
    unknown = refusal(cluster="puhti", gpus=2, stack="laif")
    assert (
        unknown.problem == "puhti has no software stack called 'laif' (known: pytorch, apptainer)."
    )
    elsewhere = RunFolder(Path("/scratch/a,b/runs/mnist"))
    with pytest.raises(ScaletrainError, match="cannot be bound into a container"):
        render(plan_for(cluster="lumi", gpus=8, container_image="x.sif"), folder=elsewhere)
    # Singularity reads ':' as the separator of source and destination.
    with pytest.raises(ScaletrainError, match="cannot be bound into a container"):
        render(plan_for(cluster="lumi", gpus=8), folder=RunFolder(Path("/scratch/a:b/runs/x")))


def test_your_binds_reach_the_container_after_the_jobs_own_folders() -> None:
    script = render(plan_for(cluster="lumi", gpus=16, binds=("/flash/p/data:/data",)))
    assert "binds=/scratch/project_465000000/me,/flash/p/data:/data\n" in script


def test_a_container_stack_without_an_image_runs_no_container() -> None:
    plan = plan_for(cluster="puhti", gpus=4, stack="apptainer")
    assert (plan.software.container_image, plan.software.container_command) == (None, None)
    assert "apptainer exec" not in render(plan)  # plan.toml and the job script agree


def test_unconverted_scripts_get_what_their_own_launcher_gives() -> None:
    for mode in ("srun", "deepspeed", "lightning"):
        script = render(plan_for(cluster="puhti", mode=mode, gpus=8))
        exports = (
            "export RANK=$SLURM_PROCID LOCAL_RANK=$SLURM_LOCALID WORLD_SIZE=$SLURM_NTASKS "
            "LOCAL_WORLD_SIZE=4"
        )
        assert exports in script, mode
    # deepspeed's launcher passes --local_rank right after the script, to a script whose
    # parser takes it (here: as asked); the preflight gets none.
    deepspeed = render(
        plan_for(cluster="puhti", mode="deepspeed", gpus=8, local_rank_argument=True)
    )
    assert 'set -- "$1" --local_rank="$SLURM_LOCALID" "${@:2}"' in deepspeed
    assert launch_lines(deepspeed)[-1].endswith('bash -c "$in_task" task train.py')
    assert launch_lines(deepspeed)[0].endswith("task -m scaletrain.diagnose.preflight")
    # The preflight checks the variables the script will read in its mode.
    assert "export SCALETRAIN_SCRIPT_VARIABLES=RANK,LOCAL_RANK,WORLD_SIZE," in deepspeed


def test_precision_is_the_users() -> None:
    accelerate = render(plan_for(cluster="puhti", mode="accelerate", gpus=8))
    assert "mixed_precision" not in accelerate and "dynamo_backend" not in accelerate
    bf16 = render(plan_for(cluster="puhti", mode="accelerate", gpus=8, precision="bf16"))
    assert "--mixed_precision=bf16 " in launch_lines(bf16)[-1]
    fp32 = render(plan_for(cluster="puhti", mode="accelerate", gpus=8, precision="fp32"))
    assert "--mixed_precision=no " in launch_lines(fp32)[-1]  # accelerate's word for fp32
    with pytest.raises(ScaletrainError) as caught:
        plan_for(cluster="puhti", gpus=8, precision="bf16")
    assert caught.value.problem == (
        "--precision is given, but torchrun's launcher takes no precision: your script or its "
        "config decides it."
    )
    assert caught.value.hint.endswith("or use --mode accelerate.")
    # With a model to estimate, --precision is the estimate's: the launcher still gets none.
    model = ModelSize(parameters=10**9, precision="fp32")
    estimated = plan_for(cluster="puhti", gpus=8, precision="fp32", model=model)
    assert "precision" not in launch_lines(render(estimated))[-1]
    assert estimated.memory_estimates


def test_extras_go_where_the_job_script_says() -> None:
    script = render(
        plan_for(cluster="lumi", gpus=16, sbatch=("--exclusive", "--mail-type=END"),
                 launcher_args=("--log-dir", "logs/torchrun"), extra_setup=("export CXX=g++-12",),
                 before=("cp -a /scratch/p/data.h5 /tmp/",), after=("cp -a /tmp/out /scratch/p/",),
                 environment={"DATA": "/flash/$USER/x y"}, expand=("DATA",))
    )  # fmt: skip
    assert "# Yours (--sbatch).\n#SBATCH --exclusive\n#SBATCH --mail-type=END\n" in script
    training = [line for line in launch_lines(script) if "-- train.py" in line]
    assert "--log-dir logs/torchrun --nnodes=" in training[0]
    assert "\nexport CXX=g++-12\n" in script
    every_node = 'srun --nodes="$SLURM_JOB_NUM_NODES" --ntasks-per-node=1 --kill-on-bad-exit=1'
    before = f"if ! {every_node} bash -c 'cp -a /scratch/p/data.h5 /tmp/'; then"
    after = f"{every_node} bash -c 'cp -a /tmp/out /scratch/p/' || echo"
    assert script.index(before) < script.index("\n# Training runs") < script.index(after)
    assert 'export DATA="/flash/$USER/x y"\n' in script
    literal = render(plan_for(cluster="lumi", gpus=16, environment={"DATA": "/flash/$USER"}))
    assert "export DATA='/flash/$USER'\n" in literal


def test_requeue_and_graceful_stop_lines() -> None:
    script = render(plan_for(cluster="puhti", gpus=8, time="2:00:00"))
    for line in (
        "#SBATCH --output=logs/%x-%j.out",
        "#SBATCH --open-mode=append",
        "#SBATCH --signal=B:USR1@300",
        "#SBATCH --requeue",
        "trap '",
        'touch "$run_dir/stop-requested"\' USR1',
        # The functions every job shares (templates/job_functions.sh, test_job_functions.py).
        'source "$run_dir/programs/job_functions.sh" || exit 1',
        '[[ "$run_dir/stopped.json" -nt "$0" ]] && requeue_after_stop 3',
    ):
        assert line in script
    # Training runs in the background so that the trap can run while bash waits.
    joined = re.sub(r" \\\n\s*", " ", script)
    assert launch_lines(script)[-1] + " &\ntraining=$!\n" in joined
    assert joined.index('wait_for "$training"') > joined.index("training=$!")
    short = render(plan_for(cluster="puhti", gpus=8, time="10:00"), max_requeues=5)
    # A fifth of a 10-minute limit, in the whole seconds --signal takes.
    assert "#SBATCH --signal=B:USR1@120\n" in short and "requeue_after_stop 5\n" in short
    never = render(plan_for(cluster="puhti", gpus=8), requeue=False)
    assert "#SBATCH --requeue" not in never and "requeue_after_stop" not in never
    assert "requeue_after_hang" not in never and "--max-requeues" not in never
    assert "#SBATCH --signal=B:USR1@300" in never  # still checkpoints before the limit
    with pytest.raises(ScaletrainError) as caught:
        render(plan_for(cluster="puhti", gpus=8, time="10:00"), stop_margin_s=600)
    assert caught.value.problem == (
        "--stop-margin 600 s is not shorter than the time limit 0:10:00 (600 s): the job would "
        "be asked to stop at once."
    )
    assert caught.value.hint.startswith("give a margin that leaves time to train, or leave it out")


def test_hang_watchdog_lines() -> None:
    script = render(plan_for(cluster="lumi", gpus=16, container_image="/x/pytorch.sif"))
    joined = re.sub(r" \\\n\s*", " ", script)
    # Beside the training step, in the container (where scaletrain is) with the stack's run
    # command (LUMI's LAIF images: singularity run), told the limit.
    # With what Slurm says of the job, from which it decides the requeue (hang.env).
    assert (
        'singularity run "$CONTAINER" python3 -u -m scaletrain.launch.watchdog '
        '--run-dir "$run_dir" --hang-limit 300 --step-pid "$training" --max-requeues 3 '
        '--slurm-job "$(scontrol --oneliner show job "$SLURM_JOB_ID")" '
        '--slurm-partition "$(scontrol --oneliner show partition "$SLURM_JOB_PARTITION")" &'
        "\nwatchdog=$!"
    ) in joined
    assert "export SCALETRAIN_HANG_LIMIT=300" in script  # the ranks pace their heartbeats
    # Its status 75 requeues as it decided (templates/job_functions.sh, test_job_functions.py).
    assert "\n((watchdog_status == 75)) && requeue_after_hang 75\n" in script
    # A requeue that Slurm did itself (NODE_FAIL) is recorded when the job starts again.
    assert "\nrecord_slurm_requeue\n" in script
    no_requeue = render(plan_for(cluster="lumi", gpus=16), requeue=False, hang_limit_s=45)
    assert "--hang-limit 45" in no_requeue and "requeue_after_hang" not in no_requeue
    assert "--max-requeues" not in no_requeue
    assert "training hung; not requeued (requeue is off; --requeue turns it on)" in no_requeue
    off = render(plan_for(cluster="lumi", gpus=16), hang_limit_s=0)
    assert "scaletrain.launch.watchdog" not in off and "watchdog_status" not in off
    assert "export SCALETRAIN_HANG_LIMIT=0" in off  # no heartbeats either
    with pytest.raises(ScaletrainError, match="--hang-limit -1 is negative"):
        render(plan_for(cluster="lumi", gpus=16), hang_limit_s=-1)


def test_torchrun_restarts_and_rendezvous() -> None:
    one_node = launch_lines(render(plan_for(cluster="puhti", gpus=4)))[-1]
    standalone = "--standalone --nnodes=1 --nproc_per_node=4 --max_restarts=3 -- train.py"
    assert f"python3 -m torch.distributed.run {standalone}" in one_node
    script = render(plan_for(cluster="puhti", gpus=8), max_restarts=1)
    assert "export MASTER_PORT=$((20000 + SLURM_JOB_ID % 10000))" in script
    assert (
        '--rdzv_endpoint="$MASTER_ADDR:$MASTER_PORT" --rdzv_conf=is_host=false --max_restarts=1'
        " -- train.py" in (launch_lines(script)[-1])
    )


@pytest.mark.parametrize("mode", ["torchrun", "accelerate"])
def test_each_multi_node_launch_has_a_rendezvous_store_held_by_the_batch_shell(mode: str) -> None:
    """The launchers' exit barrier needs the store until every node has its answer
    (pytorch#69520): the batch shell starts one before each launch and stops it after."""
    script = render(plan_for(cluster="puhti", gpus=8, mode=mode))
    # With the job's own Python: the store needs torch, not scaletrain.
    program = '<"$run_dir/programs/rendezvous_store.py" &\n'
    assert f'python3 - "$MASTER_ADDR" "$MASTER_PORT" {program}' in script
    assert "scaletrain.launch.rendezvous_store" not in script
    lines = [line.strip() for line in script.splitlines()]
    launches = [n for n, line in enumerate(lines) if re.match(r"(if ! )?srun ", line)]
    assert len(launches) == 2  # the preflight and training
    for launch in launches:
        assert lines[launch - 1] == "start_rendezvous_store"
        assert "stop_rendezvous_store" in lines[launch:]
    for line in launch_lines(script):
        assert "is_host=false" in line
    # The training's store is stopped once the training step has ended, whatever its end.
    assert lines.index("stop_rendezvous_store", launches[1]) > lines.index('wait_for "$training"')
    one_node = render(plan_for(cluster="puhti", gpus=4, mode=mode))
    assert "rendezvous_store" not in one_node and "is_host" not in one_node
    srun = render(plan_for(cluster="puhti", gpus=8, mode="srun"))
    assert "rendezvous_store" not in srun


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


def test_what_each_mode_exports_on_gpus_and_on_cpus() -> None:
    def exports(script: str) -> set[str]:
        return {
            line.removeprefix("export ")
            for line in script.splitlines()
            if line.startswith("export ")
        }

    # accelerate runs its processes on CPUs when told so (the local test cluster has no GPUs),
    # and the preflight then expects no GPU.
    on_cpus = exports(render(plan_for(cluster="local", gpus=2, mode="accelerate")))
    assert {"ACCELERATE_USE_CPU=true", "SCALETRAIN_EXPECTED_GPUS_PER_NODE=0"} <= on_cpus
    on_gpus = exports(render(plan_for(cluster="puhti", gpus=4, mode="accelerate")))
    assert "SCALETRAIN_EXPECTED_GPUS_PER_NODE=4" in on_gpus
    assert not any(line.startswith("ACCELERATE_USE_CPU") for line in on_gpus)
    # Restarting launchers need their own rendezvous store per restart; without restarts, not.
    restarts = "TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1"
    assert restarts in exports(render(plan_for(cluster="puhti", gpus=8), max_restarts=1))
    assert restarts not in exports(render(plan_for(cluster="puhti", gpus=8), max_restarts=0))


def test_cpu_masks_go_to_whoever_binds_the_processes() -> None:
    """Whole LUMI nodes: srun binds one task per GCD (the preflight checks the masks);
    torchrun's one task per node leaves binding to st.init(). Part of a node: no masks."""
    exported = {}
    for mode in ("torchrun", "srun"):
        for gpus in (2, 16):
            script = render(plan_for(cluster="lumi", mode=mode, gpus=gpus))
            exported[mode, gpus] = {
                name: re.findall(f"\\nexport {name}=(.*)\\n", script)
                for name in ("SCALETRAIN_CPU_MASKS", "SCALETRAIN_EXPECTED_CPU_MASKS")
            }
    assert exported == {
        ("torchrun", 16): {
            "SCALETRAIN_CPU_MASKS": [LUMI_MASKS],
            "SCALETRAIN_EXPECTED_CPU_MASKS": [],
        },
        ("srun", 16): {"SCALETRAIN_CPU_MASKS": [], "SCALETRAIN_EXPECTED_CPU_MASKS": [LUMI_MASKS]},
        ("torchrun", 2): {"SCALETRAIN_CPU_MASKS": [], "SCALETRAIN_EXPECTED_CPU_MASKS": []},
        ("srun", 2): {"SCALETRAIN_CPU_MASKS": [], "SCALETRAIN_EXPECTED_CPU_MASKS": []},
    }


def test_the_jobs_python_is_asked_for_scaletrain_where_the_job_runs_its_code() -> None:
    plan = plan_for(cluster="puhti", gpus=4)
    nothing = {"preflight": False, "hang_limit_s": 0, "monitor_interval_s": None}
    # --no-check and no tool of scaletrain's: nothing to check.
    assert "python3 - " not in render(plan, **nothing)
    # The preflight checks torch; without scaletrain the job trains without its tools.
    checked = render(plan, **(nothing | {"preflight": True}))
    assert "\npython3 - need:torch tool:scaletrain tested:2.7:2.15 <" in checked
    for runs in (
        {"hang_limit_s": 60},  # the hang watchdog
        {"monitor_interval_s": 5.0},  # the monitor's sampler
    ):
        assert "\npython3 - tool:scaletrain <" in render(plan, **(nothing | runs)), runs
    # Training through scaletrain's instrumented entry cannot do without it.
    instrumented = render(plan, **(nothing | {"instrument": (("SCALETRAIN_MAX_STEPS", "10"),)}))
    assert "\npython3 - need:scaletrain <" in instrumented


def test_the_environment_check_sets_up_the_jobs_software_in_your_folder() -> None:
    plan = plan_for(cluster="lumi", gpus=8, venv="/project/project_465000000/venv")
    check = render_environment_check(plan, WORKDIR, RunFolder(WORKDIR / "check"))
    assert check.startswith(
        "#!/bin/bash\nrun_dir=/scratch/project_465000000/me/check\n"
        "cd /scratch/project_465000000/me || exit 1\n"
    )
    assert "\nmodule load lumi-aif-singularity-bindings || " in check
    assert "binds=/scratch/project_465000000/me,/project/project_465000000/venv\n" in check
    assert "\nexport SINGULARITYENV_PREPEND_PATH=/project/project_465000000/venv/bin\n" in check
    assert (
        '\nsingularity run "$CONTAINER" python3 - need:torch tool:scaletrain tested:2.7:2.15 '
        '<"$run_dir/programs/import_check.py"\n' in check
    )
    assert "#SBATCH" not in check and "srun" not in check  # a login node, no job


def test_a_squashfs_venv_is_mounted_also_when_the_run_folder_is_elsewhere() -> None:
    plan = plan_for(cluster="lumi", gpus=16, squashfs="/scratch/p/env.sqsh")
    script = render(plan, folder=RunFolder(Path("/flash/p/runs/mnist")))
    binds = "/scratch/project_465000000/me,/flash/p/runs/mnist,"
    assert f"binds={binds}/scratch/p/env.sqsh:/user-software:image-src=/\n" in script


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


def test_the_instrumented_entry_runs_your_script_with_its_arguments() -> None:
    plan = plan_for(cluster="puhti", gpus=4, script_args=("--lr", "1"))
    script = render(plan, instrument=(("SCALETRAIN_MAX_STEPS", "10"),))
    assert launch_lines(script)[-1].endswith(
        "--module -- scaletrain.observe.profile.instrument train.py --lr 1"
    )
    assert "\nexport SCALETRAIN_MAX_STEPS=10\n" in script


def test_a_missing_package_hint_points_to_the_sites_guide() -> None:
    lumi = render(plan_for(cluster="lumi", gpus=16, stack="csc"))
    assert "(docs/site-lumi.md)." in lumi
    puhti = render(plan_for(cluster="puhti", gpus=4, venv="none"))
    assert "(docs/site-puhti-mahti.md)." in puhti
