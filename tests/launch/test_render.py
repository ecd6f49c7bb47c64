"""What each line of a rendered job script does: launch lines, binding, restarts and
requeue, the hang watchdog, exports, the documented example scripts."""

from __future__ import annotations

import re
from importlib.resources import files

import pytest

from scaletrain.core.errors import ScaletrainError
from scaletrain.planning.memory import ModelSize
from scaletrain.planning.modes import launch_modes
from tests.conftest import REPO
from tests.support.doc_samples import blocks
from tests.support.golden_jobs import GOLDEN_JOBS, expected_script, golden_file
from tests.support.job_scripts import launch_lines, plan_for, render

MODES = list(launch_modes())


# The cores nearest GCD 0..7 on LUMI (seed 003), as in the lumi profile.
LUMI_MASKS = ",".join(
    [
        *("0xfe000000000000", "0xfe00000000000000", "0xfe0000", "0xfe000000"),
        *("0xfe", "0xfe00", "0xfe00000000", "0xfe0000000000"),
    ]
)


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


def test_the_instrumented_entry_runs_your_script_with_its_arguments() -> None:
    plan = plan_for(cluster="puhti", gpus=4, script_args=("--lr", "1"))
    script = render(plan, instrument=(("SCALETRAIN_MAX_STEPS", "10"),))
    assert launch_lines(script)[-1].endswith(
        "--module -- scaletrain.observe.profile.instrument train.py --lr 1"
    )
    assert "\nexport SCALETRAIN_MAX_STEPS=10\n" in script
