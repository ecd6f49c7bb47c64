"""The seed's image examples (CaSToRC, seed 002) train to their documented accuracy on the
stand-in data, written in the data sets' own formats and read by torchvision's classes: with
`scaletrain run`, and as 2-node jobs submitted with the command of each example's README."""

from __future__ import annotations

import json
import pickle
import shlex
import shutil
from pathlib import Path

import pytest

from tests.conftest import REPO, scaletrain
from tests.support.slurm_cluster import SlurmCluster
from tests.support.slurm_jobs import finished, job_environ, submit

pytestmark = [pytest.mark.multiprocess, pytest.mark.long]

# Documented in each example's README for its stand-in data.
FASHION_MNIST_ACCURACY = 0.90  # WRN-10-1, 4 epochs (runs here: 97-98%)
CIFAR100_ACCURACY = 0.25  # tiny EfficientNet, 6 epochs; chance is 1% (runs here: 38-40%)


def train(tmp_path: Path, example: str, *args: str) -> dict[str, float]:
    result = scaletrain(
        "run", "--nproc", "2", "--name", example, str(REPO / "examples" / example / "train.py"),
        "--data-dir", str(tmp_path / "data"), "--create-small-data", *args,
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    summary: dict[str, float] = json.loads(
        (tmp_path / "runs" / example / "metrics" / "summary.json").read_text()
    )
    return summary


def test_wide_resnet_on_fashion_mnist(tmp_path: Path) -> None:
    summary = train(tmp_path, "fashion_mnist", "--depth", "10", "--width", "1", "--epochs", "4")
    assert summary["test_accuracy"] >= FASHION_MNIST_ACCURACY
    raw = tmp_path / "data" / "FashionMNIST" / "raw"  # where torchvision's class looks
    assert (raw / "t10k-labels-idx1-ubyte").stat().st_size == 8 + 299


def test_efficientnet_with_auxiliary_classifier_on_cifar100(tmp_path: Path) -> None:
    args = ("--model", "tiny", "--epochs", "6", "--batch-size", "64")
    summary = train(tmp_path, "cifar100", *args)
    assert summary["test_accuracy"] >= CIFAR100_ACCURACY
    meta = pickle.loads((tmp_path / "data" / "cifar-100-python" / "meta").read_bytes())
    assert len(meta["fine_label_names"]) == 100 and len(meta["coarse_label_names"]) == 20


def readme_command(example: str, start: str) -> list[str]:
    """The one command of the example's README that begins with `start`, its continuation
    lines joined, split into words as the shell splits it."""
    text = (REPO / "examples" / example / "README.md").read_text().replace("\\\n", " ")
    found = [line.strip() for line in text.splitlines() if line.strip().startswith(start)]
    assert len(found) == 1, f"examples/{example}/README.md: {len(found)} lines `{start} ...`"
    return shlex.split(found[0])


@pytest.mark.slurm
@pytest.mark.parametrize(
    ("example", "data", "accuracy", "model_line"),
    [
        # The CPU processes have no SyncBatchNorm: the script says so, as its README does.
        ("fashion_mnist", "FashionMNIST/raw", FASHION_MNIST_ACCURACY,
         "7 BatchNorm layers with statistics per rank (SyncBatchNorm needs a GPU)"),
        ("cifar100", "cifar-100-python", CIFAR100_ACCURACY,
         "EfficientNet tiny + auxiliary classifier"),
    ],
    ids=["fashion_mnist", "cifar100"],
)  # fmt: skip
def test_readme_job_trains_on_both_nodes(
    slurm_cluster: SlurmCluster,
    tmp_path: Path,
    example: str,
    data: str,
    accuracy: float,
    model_line: str,
) -> None:
    # The README's command as a user runs it: from a checkout's top folder, paths relative.
    shutil.copytree(
        REPO / "examples", tmp_path / "examples", ignore=shutil.ignore_patterns("__pycache__")
    )
    command = readme_command(example, "scaletrain submit -c local")
    environ = job_environ(slurm_cluster, tmp_path)
    folder, job_id = submit(slurm_cluster, tmp_path, environ, command[2:])
    output = finished(slurm_cluster, folder, job_id)

    assert "scaletrain: 2 process(es) on 2 nodes via torchrun" in output
    assert model_line in output
    preflight = json.loads((folder.report / "preflight.json").read_text())
    ranks = [entry["facts"] for entry in preflight["ranks"]]
    assert [(rank["rank"], rank["host"], rank["world_size"]) for rank in ranks] == [
        (0, "n1", 2), (1, "n2", 2),
    ], output  # fmt: skip
    # The stand-in was written where the relative --data-dir points: in the submit folder.
    assert (tmp_path / command[command.index("--data-dir") + 1] / data).is_dir()
    summary = json.loads((folder.metrics / "summary.json").read_text())
    assert len(summary["peak_memory_gb"]) == 2  # both ranks reached the end
    assert summary["test_accuracy"] >= accuracy, output
    history = [json.loads(line) for line in folder.metrics.joinpath("train.jsonl").open()]
    assert len(history) > 1 and history[-1]["loss"] < history[0]["loss"]


def readme_submit_commands() -> list[tuple[str, list[str]]]:
    """Every `scaletrain submit` command of the examples' READMEs, continuation lines joined."""
    commands = []
    for readme in sorted((REPO / "examples").glob("*/README.md")):
        text = readme.read_text().replace("\\\n", " ")
        for line in text.splitlines():
            if line.strip().startswith("scaletrain submit "):
                commands.append((readme.parent.name, shlex.split(line.strip())))
    return commands


@pytest.mark.parametrize(
    ("example", "command"),
    readme_submit_commands(),
    ids=[" ".join(command[2:4]) + f" {example}" for example, command in readme_submit_commands()],
)
def test_every_submit_command_of_an_examples_readme_is_accepted(
    example: str, command: list[str], tmp_path: Path
) -> None:
    """A user pastes these from a checkout's top folder: each must plan and render (--dry-run:
    nothing is submitted), its script options after the script, not taken by submit."""
    (tmp_path / "examples").symlink_to(REPO / "examples")
    result = scaletrain("submit", "--dry-run", *command[2:], cwd=tmp_path)
    assert result.returncode == 0, (example, result.stderr)
    assert "#SBATCH --time=" in result.stdout
