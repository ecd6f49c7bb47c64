"""`scaletrain submit` where no job runs: --dry-run, its options, and every way it says no.
Submissions to a real Slurm are in tests/launch/test_jobs_on_slurm.py."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import typer.main

from scaletrain.cli.plan import plan
from scaletrain.cli.submit import submit
from scaletrain.planning.plan import write_plan
from tests.conftest import clean_environ, scaletrain
from tests.support.job_scripts import plan_for

LUMI_16 = ["--cluster", "lumi", "--gpus", "16", "--time", "2:00:00"]


@pytest.fixture
def environ(tmp_path: Path) -> dict[str, str]:
    # No Slurm on PATH, wide lines, no profiles of the machine's user.
    return clean_environ(
        PATH=str(Path(sys.executable).parent), COLUMNS="200", XDG_CONFIG_HOME=str(tmp_path / "c")
    )


def test_dry_run_prints_the_job_script_and_writes_nothing(
    tmp_path: Path, environ: dict[str, str]
) -> None:
    (tmp_path / "train.py").touch()
    result = scaletrain(
        "submit",
        *LUMI_16,
        "--name",
        "big",
        "--dry-run",
        "train.py",
        "--epochs",
        "3",
        cwd=tmp_path,
        environ=environ,
    )
    assert result.returncode == 0, result.stderr
    script = result.stdout
    assert script.startswith("#!/bin/bash\n# scaletrain job for run big: 2 node(s) × 8 GPU(s)")
    assert "#SBATCH --job-name=big\n#SBATCH --partition=standard-g\n#SBATCH --nodes=2\n" in script
    assert f"run_dir={tmp_path}/runs/big\n" in script and f"\ncd {tmp_path} || exit 1\n" in script
    assert "-- train.py --epochs 3 &\n" in script
    assert subprocess.run(["bash", "-n"], input=script, text=True, check=False).returncode == 0
    assert list(tmp_path.iterdir()) == [tmp_path / "train.py"]


def test_job_options_change_the_script(tmp_path: Path, environ: dict[str, str]) -> None:
    (tmp_path / "train.py").touch()
    options = ["--no-requeue", "--no-check", "--stop-margin", "600", "--max-restarts", "0"]
    result = scaletrain(
        "submit", *LUMI_16, *options, "--dry-run", "train.py", cwd=tmp_path, environ=environ
    )
    assert result.returncode == 0, result.stderr
    script = result.stdout
    assert "#SBATCH --signal=B:USR1@600\n" in script and "--max_restarts=0 \\\n" in script
    assert "#SBATCH --requeue" not in script and "scontrol requeue" not in script
    assert "diagnose.preflight" not in script


def test_restarts_and_requeue_only_for_scripts_that_resume(
    tmp_path: Path, environ: dict[str, str]
) -> None:
    """A script that never resumes would train again from the start after a restart or a
    requeue: both are off for it unless asked for, and `submit` says so before the queue."""

    def dry_run(source: str, *options: str) -> tuple[str, str]:
        (tmp_path / "train.py").write_text(source)
        result = scaletrain(
            "submit", *LUMI_16, *options, "--dry-run", "train.py", cwd=tmp_path, environ=environ
        )
        assert result.returncode == 0, result.stderr
        return result.stdout, result.stderr

    plain = "import torch\nimport torch.distributed as dist\ndist.init_process_group('nccl')\n"
    script, said = dry_run(plain)
    assert "--max_restarts=0 \\\n" in script and "#SBATCH --requeue" not in script
    assert "scontrol requeue" not in script
    assert "  recovery      no restart after a crash, no requeue: the script shows no way" in said
    assert "--max-restarts N and --requeue turn them on" in said
    resumes = "import scaletrain as st\nckpt = st.Checkpointer(model=None)\n"
    script, said = dry_run(resumes)
    assert "--max_restarts=3 \\\n" in script and "#SBATCH --requeue\n" in script
    assert (
        "  recovery      up to 3 restart(s) after a crash, requeued after a stop at a "
        "checkpoint: the script resumes (st.Checkpointer)"
    ) in said
    script, said = dry_run(plain, "--requeue", "--max-restarts", "2")
    assert "--max_restarts=2 \\\n" in script and "#SBATCH --requeue\n" in script
    assert "requeued after a stop at a checkpoint: as asked" in said


def test_submit_takes_the_same_request_options_as_plan() -> None:
    def options(command: object) -> dict[str, tuple[str, ...]]:
        click = typer.main.get_command_from_info(
            typer.models.CommandInfo(callback=command),  # type: ignore[arg-type]
            pretty_exceptions_short=True,
            rich_markup_mode=None,
        )
        return {param.name or "": tuple(param.opts) for param in click.params}

    planned, submitted = options(plan), options(submit)
    assert planned.items() - {("as_json", ("--json",))} <= submitted.items()
    assert set(submitted) - set(planned) == {
        "name", "runs_dir", "requeue", "max_requeues", "stop_margin", "max_restarts",
        "no_check", "dry_run", "monitor_interval", "profile",
        "rehearse", "rehearsal_steps", "rehearsal_time",
    }  # fmt: skip


def test_without_slurm_nothing_is_written(tmp_path: Path, environ: dict[str, str]) -> None:
    (tmp_path / "train.py").touch()
    result = scaletrain(
        "submit", *LUMI_16, "--name", "x", "train.py", cwd=tmp_path, environ=environ
    )
    assert result.returncode == 2
    assert "error: Slurm's sbatch was not found on this machine" in result.stderr
    assert "HINT: run this on a login node of your cluster" in result.stderr
    assert not (tmp_path / "runs").exists()


def test_an_existing_run_with_another_plan_is_kept(tmp_path: Path, environ: dict[str, str]) -> None:
    (tmp_path / "train.py").touch()
    saved = tmp_path / "runs" / "mnist" / "plan.toml"
    saved.parent.mkdir(parents=True)
    write_plan(plan_for(cluster="lumi", gpus=8, time="2:00:00"), saved)
    before = saved.read_text()
    result = scaletrain(
        "submit", *LUMI_16, "--name", "mnist", "train.py", cwd=tmp_path, environ=environ
    )
    assert result.returncode == 2
    assert (
        "error: Run 'mnist' exists with a different plan (partition: small-g → standard-g; "
        "nodes: 1 → 2; saved in runs/mnist/plan.toml)."
    ) in result.stderr
    assert "HINT: give the same options to continue that run, or another --name" in (result.stderr)
    assert saved.read_text() == before and sorted(saved.parent.iterdir()) == [saved]


@pytest.mark.parametrize(
    ("arguments", "problem"),
    [
        (["--name", "my run", "train.py"], "The run name 'my run' is not usable as a Slurm job"),
        (["--name", "x", "tain.py"], "The training script 'tain.py' does not exist in"),
        (["--name", "x", "--stop-margin", "7200", "train.py"], "--stop-margin 7200 s is not"),
        (["--name", "x", "--max-requeues", "-1", "train.py"], "--max-requeues -1 is negative"),
    ],
)
def test_bad_requests_are_one_line_errors(
    tmp_path: Path, environ: dict[str, str], arguments: list[str], problem: str
) -> None:
    (tmp_path / "train.py").touch()
    result = scaletrain("submit", *LUMI_16, *arguments, cwd=tmp_path, environ=environ)
    assert result.returncode == 2
    assert result.stderr.startswith(f"error: {problem}")
    assert "HINT:" in result.stderr and "Traceback" not in result.stderr


def test_rendering_imports_no_torch() -> None:
    # `submit` runs on login nodes without torch: planning and rendering must not need it.
    probe = (
        "import sys; from tests.support.job_scripts import plan_for, render; "
        "render(plan_for(cluster='lumi', gpus=16, mode='accelerate')); "
        "print('torch' in sys.modules)"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe],
        capture_output=True,
        text=True,
        check=True,
        cwd=Path(__file__).parents[2],
    )
    assert result.stdout.strip() == "False"


GUIDE_SCRIPT = """
import argparse, os, sys
import deepspeed
import torch

sys.path.append(os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
from resources.hdf5_dataset import HDF5Dataset

if __name__ == "__main__":
    parser = deepspeed.add_config_arguments(argparse.ArgumentParser())
    args = parser.parse_args()
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
"""


@pytest.fixture
def guide_job(tmp_path: Path, environ: dict[str, str]) -> Callable[..., str]:
    """`submit --dry-run` of the LUMI AI guide's script shape with more options: the script."""
    (tmp_path / "guide.py").write_text(GUIDE_SCRIPT)

    def dry_run(*options: str) -> str:
        result = scaletrain(
            "submit", *LUMI_16, *options, "--dry-run", "guide.py", cwd=tmp_path, environ=environ
        )
        assert result.returncode == 0, result.stderr
        return result.stdout

    return dry_run


def test_srun_tasks_see_every_gcd_for_a_script_that_picks_by_local_rank(
    guide_job: Callable[..., str],
) -> None:
    """set_device(LOCAL_RANK) needs every GCD visible, or local rank 1 is invalid."""
    srun = guide_job("--mode", "srun")
    assert "ROCR_VISIBLE_DEVICES" not in srun and "LOCAL_RANK=$SLURM_LOCALID" in srun
    own = guide_job("--mode", "srun", "--visible-gpus", "own")
    assert "export ROCR_VISIBLE_DEVICES=$SLURM_LOCALID" in own


def test_deepspeed_passes_no_local_rank_to_a_parser_without_it(
    guide_job: Callable[..., str],
) -> None:
    """argparse with deepspeed.add_config_arguments alone stops at --local_rank (exit 2)."""
    deepspeed = guide_job("--mode", "deepspeed")
    assert "--local_rank" not in deepspeed
    forced = guide_job("--mode", "deepspeed", "--local-rank-arg", "yes")
    assert 'set -- "$1" --local_rank="$SLURM_LOCALID" "${@:2}"' in forced
    # Its own `resources` package is on its sys.path only: a warning if missing, no refusal.
    assert "path:. need:torch need:deepspeed maybe:resources tool:scaletrain" in deepspeed


def test_the_rendezvous_store_needs_no_scaletrain_in_the_jobs_python(
    guide_job: Callable[..., str],
) -> None:
    torchrun = guide_job()
    assert "scaletrain.launch.rendezvous_store" not in torchrun
    # Its program is fed to the job's own Python from the run folder (launch/job_programs.py).
    store = '<"$run_dir/programs/rendezvous_store.py" &'
    assert f'python3 - "$MASTER_ADDR" "$MASTER_PORT" {store}' in torchrun


def test_threads_under_torchrun_and_relative_sbatch_files(
    guide_job: Callable[..., str], tmp_path: Path
) -> None:
    # One thread per process, as torchrun sets by itself; the cores go to DataLoader workers.
    assert "\nexport OMP_NUM_THREADS=1\n" in guide_job()
    assert "\nexport OMP_NUM_THREADS=7\n" in guide_job("--mode", "srun")
    # A relative file of --sbatch is where the user typed the command, not in the run folder.
    output = guide_job("--sbatch=--output=slurm-%j.out")
    assert f"#SBATCH --output={tmp_path}/slurm-%j.out\n" in output
