"""The software of a rendered job: module stacks, containers and their binds, your venv or
squashfs, and the check of what the job's Python imports."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scaletrain.core.errors import ScaletrainError
from scaletrain.core.run_folder import RunFolder
from scaletrain.launch.job_script import render_environment_check
from tests.support.job_scripts import WORKDIR, launch_lines, plan_for, render


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


def test_a_missing_package_hint_points_to_the_sites_guide() -> None:
    lumi = render(plan_for(cluster="lumi", gpus=16, stack="csc"))
    assert "(docs/site-lumi.md)." in lumi
    puhti = render(plan_for(cluster="puhti", gpus=4, venv="none"))
    assert "(docs/site-puhti-mahti.md)." in puhti
