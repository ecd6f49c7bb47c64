"""The corpus of scripts as users bring them (tests/corpus/README.md), each submitted unchanged
with the command its user would type, on the 2-node test Slurm: with the module stack and the
user's venv in every mode its source uses; through the LUMI-shaped container, on the bare image
(no scaletrain in the job's Python) and with the venv made inside it; and the guide-shaped
DeepSpeed script submitted plainly, trained, then crashed and not restarted.

One fixture submits every job of the file at once, so that the cluster runs them side by side
while the tests wait for theirs in turn. Each job checks what a user checks: the job completed,
every rank trained (its report; equal weights mean averaged gradients), the script's own lines
in `scaletrain logs`, what `submit` said it read in the script, and no traceback."""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from scaletrain.core.run_folder import RunFolder
from scaletrain.slurm.history import read_job_events
from tests.conftest import REPO, scaletrain
from tests.support.slurm_cluster import SlurmCluster
from tests.support.slurm_jobs import (
    container_options,
    finished,
    job_environ,
    reports,
    submit_options,
)

# The first test waits for the fixture: 18 jobs submitted (a few seconds each), and once per
# machine DeepSpeed's op compiled for the image (minutes), while the first jobs run.
pytestmark = [pytest.mark.slurm, pytest.mark.multiprocess, pytest.mark.timeout(600)]

CORPUS = REPO / "tests" / "corpus"
GUIDE = "lumi_guide/05-multi-gpu-and-node"
"""The LUMI AI guide's chapter folder, where its user types the commands."""
DEEPSPEED = ("--deepspeed", "--deepspeed_config", "ds_config.json")
# What the job says about the guide's own `resources` and about a Python without scaletrain.
HELPER_WARNING = "cannot import resources: fine if your script adds its own folder to sys.path"
WITHOUT_SCALETRAIN = "has no scaletrain: your script trains without the preflight"


@dataclass(frozen=True, kw_only=True, slots=True)
class Shape:
    """One script of the corpus in one mode: a row of docs/slurm-jobs.md's table."""

    name: str
    folder: str
    """Where the user submits from, inside the corpus."""
    mode: str
    command: tuple[str, ...]
    """The script and its arguments, as typed after the options."""
    decided: tuple[str, ...] = ()
    """What `submit` says it read in the script (words of its lines on stderr)."""
    per_node: int = 1
    container: str | None = None
    """None: the module stack and the user's venv; "bare": --container IMAGE alone;
    "venv": the image with the venv made inside it."""

    @property
    def ranks(self) -> list[tuple[int, str]]:
        """(rank, host) of every process, as the job should place them."""
        return [(rank, f"n{rank // self.per_node + 1}") for rank in range(2 * self.per_node)]


@dataclass(frozen=True, slots=True)
class Submitted:
    """A submitted job and where to look at it."""

    shape: Shape
    cwd: Path
    folder: RunFolder
    job_id: str
    probe: Path
    said: str
    """submit's stderr: its reading of the script."""


HELPER = "resources only warned about (perhaps yours)"
BY_LOCAL_RANK = "every GPU of the node: the script reads LOCAL_RANK"
MODULE_STACK = (
    Shape(name="plain-torchrun", folder=".", mode="torchrun", command=("plain_ddp.py",)),
    Shape(name="plain-srun", folder=".", mode="srun", command=("plain_ddp.py",),
          decided=(BY_LOCAL_RANK,)),
    Shape(name="select-gpu", folder=".", mode="srun", command=("select_gpu.py",),
          decided=("only its own GPU, as cuda:0: the script uses .cuda()",)),
    Shape(name="cuda-zero", folder=".", mode="srun", command=("cuda_zero.py",),
          decided=("only its own GPU, as cuda:0: the script uses cuda:0",)),
    Shape(name="slurm-localid", folder=".", mode="srun", command=("slurm_localid.py",),
          decided=("every GPU of the node: the script reads SLURM_LOCALID",)),
    Shape(name="scontrol-master", folder=".", mode="srun", command=("scontrol_master.py",),
          decided=("every GPU of the node: the script reads SLURM_LOCALID to pick one",)),
    Shape(name="ds-local-rank", folder=".", mode="deepspeed",
          command=("deepspeed_local_rank.py", *DEEPSPEED),
          decided=("--local_rank=<local rank>: the script's parser takes it",)),
    Shape(name="lightning", folder=".", mode="lightning",
          command=("lightning_ddp.py", "--", "--gpus=1", "--nodes=2"),
          decided=("checked when the job starts: torch, pytorch_lightning",)),
    Shape(name="accelerate", folder=".", mode="accelerate", command=("accelerate_ddp.py",),
          decided=("checked when the job starts: torch, accelerate",)),
    Shape(name="guide-ddp-torchrun", folder=GUIDE, mode="torchrun",
          command=("ddp_visiontransformer.py",), decided=(HELPER,)),
    # Two tasks per node: set_device(LOCAL_RANK) must find a distinct GPU on each.
    Shape(name="guide-ddp-srun", folder=GUIDE, mode="srun", command=("ddp_visiontransformer.py",),
          decided=(BY_LOCAL_RANK, HELPER), per_node=2),
    Shape(name="guide-ds-torchrun", folder=GUIDE, mode="torchrun",
          command=("ds_visiontransformer.py", *DEEPSPEED), decided=(HELPER,)),
)  # fmt: skip
CONTAINER = (
    # Two nodes: torchrun's rendezvous store runs in the image's Python, without scaletrain.
    Shape(name="bare-plain-torchrun", folder=".", mode="torchrun", command=("plain_ddp.py",),
          container="bare"),
    Shape(name="bare-guide-ddp-torchrun", folder=GUIDE, mode="torchrun",
          command=("ddp_visiontransformer.py",), decided=(HELPER,), container="bare"),
    Shape(name="bare-guide-ds", folder=GUIDE, mode="deepspeed",
          command=("ds_visiontransformer.py", *DEEPSPEED),
          decided=("no --local_rank: the script's parser does not take it", HELPER),
          container="bare"),
    Shape(name="venv-guide-ddp-srun", folder=GUIDE, mode="srun",
          command=("ddp_visiontransformer.py",), decided=(BY_LOCAL_RANK, HELPER),
          container="venv"),
)  # fmt: skip
# The guide's DeepSpeed script, submitted as its user would type it: no --name, no options
# beyond the request. Once as it is, once with rank 1 crashing after its first step.
PLAIN_SCRIPT = ("ds_visiontransformer.py", *DEEPSPEED)
PLAIN_COMMAND = ("submit", "-c", "local", "-t", "10:00", "--nodes", "2", "--gpus-per-node", "1",
                 "--mode", "deepspeed", *PLAIN_SCRIPT)  # fmt: skip
CRASH = {"CRASH_RANK": "1"}


@pytest.fixture(scope="module")
def jobs(
    slurm_cluster: SlurmCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[dict[str, Submitted]]:
    """Every job of this file, submitted at once: the shapes by name, and the plain runs of
    the guide's DeepSpeed script as "plain" and "crash" (each from a copy of its own, where it
    is the newest run)."""
    user = tmp_path_factory.mktemp("corpus-user")
    corpus = shutil.copytree(CORPUS, user / "corpus")
    submitted = {shape.name: submit(slurm_cluster, corpus, user, shape) for shape in MODULE_STACK}
    for name, extra in (("plain", {}), ("crash", CRASH)):
        copy = shutil.copytree(CORPUS, user / name)
        submitted[name] = submit_plainly(slurm_cluster, copy / GUIDE, user, name, extra)
    extensions = compiled_for_the_image(slurm_cluster)
    for shape in CONTAINER:
        submitted[shape.name] = submit(slurm_cluster, corpus, user, shape, extensions)
    yield submitted


def compiled_for_the_image(cluster: SlurmCluster) -> dict[str, str]:
    """DeepSpeed on CPUs compiles its shared-memory op when a job first uses it (1-3 minutes
    here), into $TORCH_EXTENSIONS_DIR, and again whenever the last build was for another
    Python's paths (~/.cache/torch_extensions serves the test venv too). As the module stack
    does for its Python (module_stack.py), it is compiled for the image's Python once per
    machine, beside the image; the container jobs get the folder in their environment."""
    folder = cluster.container_image.parent / "torch-extensions"
    environ = cluster.environ(TORCH_EXTENSIONS_DIR=str(folder))
    code = "from deepspeed.ops.op_builder.cpu.comm import ShareMemCommBuilder as B; B().load()"
    command = ["singularity", "exec", str(cluster.container_image), "python3", "-c", code]
    result = subprocess.run(command, env=environ, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr
    return {"TORCH_EXTENSIONS_DIR": str(folder)}


def submit(
    cluster: SlurmCluster,
    corpus: Path,
    user: Path,
    shape: Shape,
    extra: dict[str, str] | None = None,
) -> Submitted:
    """`scaletrain submit` of one shape, from the shape's folder in the user's corpus."""
    probe = user / "probes" / shape.name
    probe.mkdir(parents=True)
    environ = job_environ(cluster, user, PROBE_DIR=str(probe), **(extra or {}))
    software = {
        None: [],
        "bare": ["--container", str(cluster.container_image)],
        "venv": container_options(cluster),
    }[shape.container]
    options = submit_options(shape.name, shape.mode, 2, shape.per_node, *software)
    cwd = corpus / shape.folder
    result = scaletrain("submit", *options, *shape.command, cwd=cwd, environ=environ,
                        venv=cluster.user_venv)  # fmt: skip
    assert result.returncode == 0, result.stderr
    folder = RunFolder(cwd / "runs" / shape.name)
    return Submitted(shape, cwd, folder, result.stdout.strip(), probe, result.stderr)


def submit_plainly(
    cluster: SlurmCluster, cwd: Path, user: Path, name: str, extra: dict[str, str]
) -> Submitted:
    """The guide's DeepSpeed script submitted with PLAIN_COMMAND from its chapter's folder."""
    probe = user / "probes" / name
    probe.mkdir(parents=True)
    environ = job_environ(cluster, user, PROBE_DIR=str(probe), **extra)
    result = scaletrain(*PLAIN_COMMAND, cwd=cwd, environ=environ, venv=cluster.user_venv)
    assert result.returncode == 0, result.stderr
    (run,) = (cwd / "runs").iterdir()  # named by submit: ds_visiontransformer-<date>-<time>
    shape = Shape(name=run.name, folder=GUIDE, mode="deepspeed", command=PLAIN_SCRIPT)
    return Submitted(shape, cwd, RunFolder(run), result.stdout.strip(), probe, result.stderr)


def user_command(cluster: SlurmCluster, job: Submitted, *args: str) -> str:
    """A `scaletrain` command (logs, status) typed in the folder the job was submitted from;
    its stdout."""
    environ = job_environ(cluster, job.cwd.parent)
    result = scaletrain(*args, cwd=job.cwd, environ=environ, venv=cluster.user_venv)
    assert result.returncode == 0, result.stderr
    return result.stdout


def check_trained(cluster: SlurmCluster, job: Submitted) -> str:
    """The job completed, every rank trained in its place with the others, the script's own
    lines are in `scaletrain logs`, and submit said what it read; the job's output."""
    output = finished(cluster, job.folder, job.job_id)
    name = job.shape.name
    ranks = reports(job.probe, "rank-*.json")
    assert [(rank["rank"], rank["host"]) for rank in ranks] == job.shape.ranks, (name, output)
    for rank in ranks:
        assert rank["world_size"] == len(job.shape.ranks), name
        assert rank["weights"] == ranks[0]["weights"], name  # gradients were averaged
    if job.shape.per_node > 1:  # each task of a node has its own local rank
        assert [rank["local_rank"] for rank in ranks] == [0, 1, 0, 1], name
    logs = user_command(cluster, job, "logs", job.folder.name)
    for rank in ranks:
        assert rank["line"] in logs, (name, rank["line"], logs)
    for words in job.shape.decided:
        assert words in job.said, (name, words, job.said)
    assert "no restart after a crash, no requeue" in job.said, name
    assert "Traceback" not in output, (name, output)
    return output


def test_every_shape_trains_unchanged_in_the_modes_of_its_source(
    slurm_cluster: SlurmCluster, jobs: dict[str, Submitted]
) -> None:
    """The module stack and the user's venv, 2 nodes: the preflight checks what each script
    reads, in the same launch line, and training follows."""
    for shape in MODULE_STACK:
        job = jobs[shape.name]
        output = check_trained(slurm_cluster, job)
        preflight = json.loads((job.folder.report / "preflight.json").read_text())
        assert preflight["passed"], (shape.name, output)
        assert (HELPER_WARNING in output) == (shape.folder == GUIDE), (shape.name, output)
    # A parser that takes --local_rank gets it, as deepspeed's launcher passes it.
    for rank in reports(jobs["ds-local-rank"].probe, "rank-*.json"):
        assert rank["local_rank_argument"] == rank["local_rank"] == 0
    # The script's own master, from scontrol, replaced the job's.
    for rank in reports(jobs["scontrol-master"].probe, "rank-*.json"):
        assert ", master n1:29500: loss" in rank["line"]


def test_the_corpus_runs_in_the_lumi_shaped_container(
    slurm_cluster: SlurmCluster, jobs: dict[str, Submitted]
) -> None:
    """On the bare image the job's Python has torch but not scaletrain: the scripts train
    without the preflight and the job says so; with the venv bound in, the preflight runs."""
    for shape in CONTAINER:
        job = jobs[shape.name]
        output = check_trained(slurm_cluster, job)
        bare = shape.container == "bare"
        assert (WITHOUT_SCALETRAIN in output) == bare, (shape.name, output)
        assert (job.folder.report / "preflight.json").exists() != bare, (shape.name, output)
        assert (HELPER_WARNING in output) == (shape.folder == GUIDE), (shape.name, output)
        for noise in ("exit barrier", "DistNetworkError"):
            assert noise not in output, (shape.name, output)


def test_the_guide_shaped_script_submitted_plainly_trains_and_a_crash_is_not_restarted(
    slurm_cluster: SlurmCluster, jobs: dict[str, Submitted]
) -> None:
    """sys.path helper, set_device(LOCAL_RANK), DeepSpeed without --local_rank, no resume:
    `submit` with nothing but the request trains it on every rank of 2 nodes; when rank 1
    crashes after its first step, the job fails once, with no restart and no requeue."""
    plain = jobs["plain"]
    output = check_trained(slurm_cluster, plain)  # its parser would have stopped at --local_rank
    assert HELPER_WARNING in output
    assert "no --local_rank: the script's parser does not take it" in plain.said

    crash = jobs["crash"]
    assert "no restart after a crash, no requeue" in crash.said
    state = slurm_cluster.wait_for_job(crash.job_id, timeout=180)
    output = user_command(slurm_cluster, crash, "logs")  # the newest run: this one
    assert state == "FAILED", output
    assert "rank 1: a deliberate crash after the first step" in output
    for rank, host in crash.shape.ranks:  # one start of each rank, none after the crash
        assert output.count(f"rank {rank}/2 local 0 on {host}: starting") == 1, output
    assert not list(crash.probe.glob("rank-*.json")), output  # no rank finished
    events = read_job_events(crash.folder)
    assert [(event.event, event.job_id) for event in events] == [("submitted", crash.job_id)]
    status = json.loads(user_command(slurm_cluster, crash, "status", "--json"))
    assert (status["run"], status["state"], status["restarts"]) == (crash.folder.name, "FAILED", 0)
