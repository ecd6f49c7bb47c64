"""The test cluster's stand-in `singularity` (tests/support/singularity.py) and its LUMI-shaped
image (tests/support/container.py): what Singularity does that LUMI jobs rely on, then the
same on the test Slurm across two nodes.

Marked `slurm`: they need what scripts/install-slurm.sh installs (bubblewrap, squashfuse),
and root (squashfuse mounts), as the Slurm tests do.
"""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
from pathlib import Path

import pytest

from tests.conftest import PROCESS_TIMEOUT_S, REPO, clean_environ
from tests.support.container import ContainerImage, build_image, make_image_venv
from tests.support.module_stack import (
    BINDINGS_MARKER,
    BINDINGS_MODULE,
    SITE_BINDINGS,
    build_module_stack,
)
from tests.support.slurm_cluster import SlurmCluster

pytestmark = pytest.mark.slurm

# Run by the image's python3 in every test: what a job's Python sees.
PYTHON_REPORT = """
import importlib.util, shutil, socket, sys
print("python", sys.executable)
print("torch", importlib.util.find_spec("torch") is not None)
print("scaletrain", importlib.util.find_spec("scaletrain") is not None)
print("srun", shutil.which("srun"))
print("host", socket.gethostname())
"""


@pytest.fixture(scope="module")
def image() -> ContainerImage:
    return build_image()


def singularity(
    image: ContainerImage, *args: str, cwd: Path, **environ: str
) -> subprocess.CompletedProcess[str]:
    """`singularity ARGS` (IMAGE stands for the image) from `cwd`, with variables added."""
    argv = ["singularity", *(str(image.path) if arg == "IMAGE" else arg for arg in args)]
    return subprocess.run(
        argv,
        env=image.environ(clean_environ(**environ)),
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT_S,
        check=False,
    )


def stand_in_mounts() -> list[str]:
    """The stand-in's squashfuse mounts still in place (it unmounts them when done)."""
    mounts = Path("/proc/self/mounts").read_text(encoding="utf-8").splitlines()
    return [line for line in mounts if "singularity-mount" in line]


def report(output: str) -> dict[str, str]:
    return dict(line.split(" ", 1) for line in output.splitlines() if " " in line)


def test_run_hands_the_command_to_the_runscript_and_exec_runs_it(
    image: ContainerImage, tmp_path: Path
) -> None:
    assert singularity(image, "run", "IMAGE", "echo", "a b", cwd=tmp_path).stdout == "a b\n"
    assert singularity(image, "exec", "IMAGE", "sh", "-c", "exit 3", cwd=tmp_path).returncode == 3
    refused = singularity(image, "shell", "IMAGE", cwd=tmp_path)
    assert refused.returncode == 255 and refused.stderr.startswith("FATAL:")


def test_the_images_python_has_torch_but_not_scaletrain_nor_slurm(
    image: ContainerImage, tmp_path: Path
) -> None:
    done = singularity(
        image, "exec", "IMAGE", "python3", "-c", PYTHON_REPORT, cwd=tmp_path, SLURM_JOB_ID="42"
    )
    assert done.returncode == 0, done.stderr
    assert report(done.stdout) | {"host": "any"} == {
        "python": "/opt/conda/bin/python3",
        "torch": "True",
        "scaletrain": "False",
        "srun": "None",
        "host": "any",
    }
    shell = (
        "command -v srun scontrol sbatch; echo $SLURM_JOB_ID; "
        "if [ -e {repo}/.venv ]; then echo visible; else echo hidden; fi; echo $PATH"
    )
    done = singularity(
        image, "exec", "IMAGE", "sh", "-c", shell.format(repo=REPO), cwd=tmp_path,
        SLURM_JOB_ID="42",
    )  # fmt: skip
    slurm_variable, venv, path = done.stdout.splitlines()
    assert slurm_variable == "42"  # while no Slurm command is found
    # The checkout is seen only where a default bind ($HOME, /tmp, /var/tmp) holds it.
    bound = any(REPO.is_relative_to(folder) for folder in ("/tmp", "/var/tmp", Path.home()))
    assert venv == ("visible" if bound else "hidden")
    assert path == "/opt/conda/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def test_binds_from_the_flag_and_the_variables_with_their_options(
    image: ContainerImage, tmp_path: Path
) -> None:
    for name in ("flag", "singularity", "apptainer"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "file").write_text(name)
    binds = {"SINGULARITY_BIND": f"{tmp_path}/singularity:/s:ro,{tmp_path}/apptainer:/a"}
    shell = "cat /f/file /s/file /a/file; touch /s/new || echo read-only; echo $SINGULARITY_BIND"
    done = singularity(
        image, "exec", "-B", f"{tmp_path}/flag:/f", "IMAGE", "sh", "-c", shell, cwd=tmp_path,
        **binds,
    )  # fmt: skip
    assert done.stdout.splitlines() == [
        "flagsingularityapptainerread-only",
        f"{tmp_path}/flag:/f,{binds['SINGULARITY_BIND']}",
    ]
    # Apptainer's variable, where both are set, as Apptainer reads them.
    done = singularity(
        image, "exec", "IMAGE", "ls", "/", cwd=tmp_path,
        APPTAINER_BIND=f"{tmp_path}/apptainer:/a", **binds,
    )  # fmt: skip
    assert "a" in done.stdout.split() and "s" not in done.stdout.split()
    missing = singularity(image, "exec", "-B", "/no/such", "IMAGE", "true", cwd=tmp_path)
    assert missing.returncode == 255 and "mount source /no/such doesn't exist" in missing.stderr


def test_a_squashfs_venv_bound_with_image_src_comes_first_on_path(
    image: ContainerImage, tmp_path: Path
) -> None:
    (tmp_path / "venv" / "bin").mkdir(parents=True)
    (tmp_path / "venv" / "bin" / "python3").write_text("#!/bin/sh\necho squashfs python\n")
    (tmp_path / "venv" / "bin" / "python3").chmod(0o755)
    squash = ["mksquashfs", "venv", "venv.sqsh", "-quiet", "-no-progress", "-no-xattrs"]
    subprocess.run(squash, cwd=tmp_path, check=True, capture_output=True, timeout=60)
    done = singularity(
        image, "run", "-B", "venv.sqsh:/user-software:image-src=/", "IMAGE", "python3",
        cwd=tmp_path, SINGULARITYENV_PREPEND_PATH="/user-software/bin",
    )  # fmt: skip
    assert done.stdout == "squashfs python\n", done.stderr
    # squashfuse has ended and unmounted.
    assert not stand_in_mounts()


def test_the_environment_passes_in_as_singularity_passes_it(
    image: ContainerImage, tmp_path: Path
) -> None:
    shell = "echo $FROM_HOST $NAME $OTHER; echo $PATH; echo $SINGULARITY_NAME $SINGULARITY_COMMAND"
    done = singularity(
        image, "exec", "IMAGE", "sh", "-c", shell, cwd=tmp_path,
        FROM_HOST="host", SINGULARITYENV_NAME="old", APPTAINERENV_NAME="new",
        SINGULARITYENV_OTHER="other", SINGULARITYENV_PREPEND_PATH="/first",
        SINGULARITYENV_APPEND_PATH="/last",
    )  # fmt: skip
    values, path, runtime = done.stdout.splitlines()
    assert values == "host new other"
    assert path.startswith("/first:/opt/conda/bin:") and path.endswith(":/bin:/last")
    assert runtime == f"{image.path.name} exec"


def test_the_runscript_maps_slurm_localid_to_rocr_visible_devices(
    image: ContainerImage, tmp_path: Path
) -> None:
    shell = ["sh", "-c", "echo ${ROCR_VISIBLE_DEVICES:-all}"]
    asked = {"SLURM_LOCALID": "3", "ROCR_USE_SLURM_LOCALID": "1"}
    assert singularity(image, "run", "IMAGE", *shell, cwd=tmp_path, **asked).stdout == "3\n"
    # `exec` skips the runscript; without the switch the runscript leaves the devices alone.
    assert singularity(image, "exec", "IMAGE", *shell, cwd=tmp_path, **asked).stdout == "all\n"
    done = singularity(image, "run", "IMAGE", *shell, cwd=tmp_path, SLURM_LOCALID="3")
    assert done.stdout == "all\n"


_ON_USR1 = """
import signal, sys, time
got = []
signal.signal(signal.SIGUSR1, lambda number, frame: got.append(number))
print("ready", flush=True)
deadline = time.monotonic() + 60
while not got and time.monotonic() < deadline:
    time.sleep(0.05)
sys.exit(5 if got else 1)
"""


def test_a_signal_to_every_process_reaches_the_command_and_stops_nothing_else(
    image: ContainerImage, tmp_path: Path
) -> None:
    # As Slurm signals a step: every process, so the stand-in's own (bubblewrap, squashfuse)
    # too; the command's handler runs and its exit status comes back.
    process = subprocess.Popen(
        ["singularity", "exec", str(image.path), "python3", "-c", _ON_USR1],
        env=image.environ(),
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        assert process.stdout is not None and process.stdout.readline() == "ready\n"
        os.killpg(process.pid, signal.SIGUSR1)
        assert process.wait(timeout=PROCESS_TIMEOUT_S) == 5
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    assert not stand_in_mounts()


def test_the_bindings_module_binds_its_folder_and_jobs_append_to_it(
    image: ContainerImage, tmp_path: Path
) -> None:
    environ = build_module_stack().login_environ(image.environ())
    (tmp_path / "data").mkdir()
    script = f"""
        module load {BINDINGS_MODULE}
        export SINGULARITY_BIND="${{SINGULARITY_BIND:+$SINGULARITY_BIND,}}{tmp_path}/data:/data"
        singularity exec {image.path} sh -c 'cat {SITE_BINDINGS}/{BINDINGS_MARKER}
            touch {SITE_BINDINGS}/new 2>/dev/null || echo read-only; ls -d /data'
    """
    done = subprocess.run(
        ["bash", "-c", textwrap.dedent(script)],
        env=environ, cwd=tmp_path, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert done.stdout.splitlines() == [
        f"bound at {SITE_BINDINGS} by {BINDINGS_MODULE}",
        "read-only",
        "/data",
    ], done.stderr


def test_a_venv_made_inside_the_image_gives_scaletrain_first_on_path(
    image: ContainerImage, tmp_path: Path
) -> None:
    venv = make_image_venv(image, tmp_path / "user")
    done = singularity(
        image, "run", "IMAGE", "python3", "-c", PYTHON_REPORT, cwd=tmp_path,
        SINGULARITYENV_PREPEND_PATH=f"{venv}/bin",
    )  # fmt: skip
    seen = report(done.stdout)
    assert (seen["python"], seen["torch"], seen["scaletrain"]) == (
        f"{venv}/bin/python3",
        "True",
        "True",
    ), done.stderr


def test_a_two_node_job_runs_each_task_in_the_container(
    slurm_cluster: SlurmCluster, tmp_path: Path
) -> None:
    # LUMI's way: the bindings module, your binds appended, your venv first on PATH, then
    # `srun singularity run`; the job finds `singularity` on its PATH, as on LUMI's nodes.
    (tmp_path / "report.py").write_text(
        PYTHON_REPORT + f"print('bindings', __import__('os').path.exists('{SITE_BINDINGS}'))\n"
    )
    (tmp_path / "job.sbatch").write_text(
        textwrap.dedent(f"""\
        #!/bin/bash
        #SBATCH --nodes=2 --ntasks-per-node=1 --time=5 --output=%j.out
        module purge && module load {BINDINGS_MODULE} || exit 1
        export SINGULARITY_BIND="${{SINGULARITY_BIND:+$SINGULARITY_BIND,}}$PWD"
        export SINGULARITYENV_PREPEND_PATH={slurm_cluster.container_venv}/bin
        srun --kill-on-bad-exit=1 singularity run {slurm_cluster.container_image} \\
            python3 report.py
        """)
    )
    environ = slurm_cluster.modules.login_environ(slurm_cluster.environ())
    submitted = slurm_cluster.run(["sbatch", "--parsable", "job.sbatch"], env=environ, cwd=tmp_path)
    job_id = submitted.stdout.strip()
    assert submitted.returncode == 0, submitted.stderr
    state = slurm_cluster.wait_for_job(job_id, timeout=PROCESS_TIMEOUT_S)
    output = (tmp_path / f"{job_id}.out").read_text()
    assert state == "COMPLETED", output
    tasks = [line for line in output.splitlines() if line.startswith("host ")]
    assert sorted(tasks) == ["host n1", "host n2"], output
    for seen in ("torch True", "scaletrain True", "srun None", "bindings True"):
        assert output.count(seen) == 2, output
