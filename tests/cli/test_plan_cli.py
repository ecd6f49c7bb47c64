"""`scaletrain plan` and `scaletrain clusters` as a user runs them: output, errors, exit codes."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.clusters.site_files import MINIMAL
from tests.conftest import clean_environ, scaletrain


@pytest.fixture
def environ(tmp_path: Path) -> dict[str, str]:
    # No profiles of the machine's user; the script that plans name (plan checks it exists).
    (tmp_path / "train.py").touch()
    return clean_environ(XDG_CONFIG_HOME=str(tmp_path / "config"))


def run(tmp_path: Path, environ: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return scaletrain(*args, cwd=tmp_path, environ=environ)


def test_plan_prints_decisions_sbatch_lines_and_cost(
    tmp_path: Path, environ: dict[str, str]
) -> None:
    args = ["--cluster", "lumi", "--gpus", "16", "--time", "2:00:00", "train.py", "--epochs", "3"]
    result = run(tmp_path, environ, "plan", *args)
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""  # the plan is the result: all of it on stdout
    sbatch = [line for line in result.stdout.splitlines() if line.startswith("#SBATCH")]
    assert sbatch == [
        "#SBATCH --partition=standard-g",
        "#SBATCH --nodes=2",
        "#SBATCH --ntasks-per-node=1",
        "#SBATCH --cpus-per-task=56",
        "#SBATCH --gpus-per-node=8",
        "#SBATCH --mem=480G",
        "#SBATCH --time=2:00:00",
    ]
    # Piped output is not wrapped: each row of the table is one line.
    assert "standard-g (whole nodes on several nodes)" in result.stdout
    assert "16 = 2 nodes × 8 GPUs; Slurm starts 1 task per node, torchrun starts 8 processes" in (
        result.stdout
    )
    assert "8 GPU-hours per hour = 2 nodes × 4; 16 for 2:00:00" in result.stdout
    assert "NCCL_SOCKET_IFNAME=hsn0,hsn1,hsn2,hsn3" in result.stdout


def test_plan_json_is_the_plan_on_stdout(tmp_path: Path, environ: dict[str, str]) -> None:
    args = ["-c", "puhti", "-N", "2", "--gpus-per-node", "4", "-t", "1:00:00", "--mode", "srun"]
    result = run(tmp_path, environ, "plan", *args, "--json", "train.py", "--lr", "0.1")
    assert result.returncode == 0, result.stderr
    plan = json.loads(result.stdout)
    assert plan["sbatch_options"] == [
        "--partition=gpu", "--nodes=2", "--ntasks-per-node=4", "--cpus-per-task=10",
        "--gres=gpu:v100:4", "--mem=320G", "--time=1:00:00",
    ]  # fmt: skip
    assert plan["script_args"] == ["--lr", "0.1"]  # the script's options stay the script's
    assert plan["billing"]["units_per_hour"] == 8 * 60 + 80 * 1 + 640 * 0.1
    assert list(tmp_path.iterdir()) == [tmp_path / "train.py"]  # plan writes nothing


def test_plan_estimates_memory_per_strategy_and_suggests_one(
    tmp_path: Path, environ: dict[str, str]
) -> None:
    model = ["--model-params", "7B", "--layers", "32", "--width", "4096", "--seq-len", "2048"]
    args = ["-c", "lumi", "-g", "16", "-t", "2:00:00", "--global-batch-size", "64", *model]
    result = run(tmp_path, environ, "plan", *args, "train.py")
    assert result.returncode == 0, result.stderr
    # The memory table is part of the plan (stdout); the suggestion a note (stderr).
    assert "memory per GPU: 7 B parameters, 16 × 64 GB" in result.stdout
    cells = [[cell.strip() for cell in line.split("│")[1:-1]]
             for line in result.stdout.splitlines() if line.startswith("│")]  # fmt: skip
    rows = {row[0]: row[1:] for row in cells if row[0] in ("ddp", "fsdp")}
    # 7 B × 20 bytes whole on every GPU; 4 samples × 2048 tokens × 4096 × 34 bytes × 32 layers
    assert rows["ddp"] == ["140.0 GB", "36.5 GB", "176.5 GB", "no"]
    assert rows["fsdp"] == ["7.9 GB", "36.5 GB", "44.4 GB", "yes"]
    assert "suggested: st.wrap(model, optimizer, strategy='hsdp')" in result.stderr
    as_json = json.loads(run(tmp_path, environ, "plan", *args, "--json", "train.py").stdout)
    assert (as_json["suggested_strategy"], as_json["gpu_peak_tflops"]) == ("hsdp", 191.5)
    assert [row["strategy"] for row in as_json["memory_estimates"]] == [
        "ddp", "fsdp", "hsdp", "zero1", "zero2", "zero3"
    ]  # fmt: skip


def test_fair_share_warning_shows_the_extra_cost(tmp_path: Path, environ: dict[str, str]) -> None:
    result = run(tmp_path, environ, "plan", "-c", "lumi", "-g", "2", "--cpus-per-gpu", "14",
                 "-t", "10:00:00", "train.py")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines()[-1] == (
        "warning: 14 cores per GPU (fair share 7) on lumi: it adds 1 GPU-hours per hour "
        "(10 for the whole run)."
    )


@pytest.mark.parametrize(
    ("args", "error", "hint"),
    [
        (
            ["-c", "mahti", "-g", "3", "-p", "gpusmall", "-t", "1:00:00"],
            "3 GPUs on 1 node for 1:00:00 does not fit mahti gpusmall: gpusmall takes at most 2 "
            "GPUs per node.",
            "ask for --partition gpumedium --gpus 4, or --gpus 2.",
        ),
        (
            ["-c", "lumi", "-N", "1", "--gpus-per-node", "9", "-t", "1:00:00"],
            "lumi nodes have 8 GPUs; --gpus-per-node 9 cannot be placed.",
            "use at most 8 per node: --gpus 8 (1 node) or --gpus 16 (2 nodes).",
        ),
        (
            ["-c", "lumi", "-g", "16", "-p", "standard-g", "-t", "3-00:00:00"],
            "16 GPUs on 2 nodes × 8 for 3-00:00:00 does not fit lumi standard-g: standard-g runs "
            "jobs for at most 2 days.",
            "ask for --partition small-g, or --time 2-00:00:00 (resume from a checkpoint).",
        ),
        (
            ["-c", "lumi", "-g", "16", "-t", "2:00:00", "--global-batch-size", "100"],
            "A global batch of 100 cannot be split evenly over 16 GPUs (6.25 samples each).",
            "use --global-batch-size 96 or 112, or a GPU count that divides 100.",
        ),
        (
            ["-c", "lumi", "-g", "4", "--cpus-per-gpu", "20", "-t", "2:00:00"],
            "20 cores per GPU × 4 GPUs is more than the 56 cores a lumi node has for jobs.",
            "ask for at most --cpus-per-gpu 14.",
        ),
        (
            ["-c", "lumi", "-g", "8", "-t", "1:00:00", "--layers", "24"],
            "--layers, --width and --seq-len describe the model of --model-params.",
            "add --model-params (e.g. 1.3B) for the memory estimate, or leave them out.",
        ),
        (
            ["-c", "lumi", "-g", "8", "-t", "1:00:00", "--model-params", "big"],
            "'big' is not a number of parameters.",
            "write it as 124M, 1.3B, 7e9 or 350000000.",
        ),
        (
            ["-c", "lumii", "-g", "4", "-t", "2:00:00"],
            "There is no cluster profile called 'lumii'; known: local, lumi, mahti, puhti.",
            "did you mean 'lumi'? Add your own site as {config}/scaletrain/clusters/lumii.toml "
            "(see docs/clusters-and-planning.md).",
        ),
    ],
)
def test_bad_requests_stop_with_one_line_and_a_hint(
    tmp_path: Path, environ: dict[str, str], args: list[str], error: str, hint: str
) -> None:
    result = run(tmp_path, environ, "plan", *args, "train.py")
    assert result.returncode == 2
    expected_hint = hint.format(config=environ["XDG_CONFIG_HOME"])
    assert result.stderr == f"error: {error}\nHINT: {expected_hint}\n"


def test_clusters_lists_profiles_and_reports_a_broken_one(
    tmp_path: Path, environ: dict[str, str]
) -> None:
    folder = Path(environ["XDG_CONFIG_HOME"]) / "scaletrain" / "clusters"
    folder.mkdir(parents=True)
    (folder / "mysite.toml").write_text(MINIMAL)
    (folder / "broken.toml").write_text(MINIMAL.replace("usable_cores", "usable_core"))
    result = run(tmp_path, environ, "clusters")
    assert result.returncode == 0, result.stderr
    cells = [
        [cell.strip() for cell in line.split("│")[1:-1]]
        for line in result.stdout.splitlines()
        if line.startswith("│")
    ]
    rows = {row[0]: row[1:] for row in cells}
    assert set(rows) == {"local", "lumi", "mahti", "puhti", "mysite"}
    assert rows["lumi"] == [
        "amd MI250X GCD (64 GB, 191.5 TFLOPS)", "8", "small-g, standard-g, dev-g",
        "packaged: lumi.toml",
    ]  # fmt: skip
    assert rows["mysite"] == ["nvidia H100", "4", "gpu", str(folder / "mysite.toml")]
    assert f"warning: {folder / 'broken.toml'}: node.usable_cores: missing (required); " in (
        result.stderr
    )


def test_clusters_show_explains_a_cluster(tmp_path: Path, environ: dict[str, str]) -> None:
    result = run(tmp_path, environ, "clusters", "show", "lumi")
    assert result.returncode == 0, result.stderr
    for text in (
        "lumi: LUMI-G: 8 AMD MI250X GCDs per node",
        "per GPU: 7 cores, 60 GB; more is billed or keeps other jobs off the node",
        "--gpus-per-node=N",
        "FI_MR_CACHE_MONITOR=userfaultfd",
        "[2026-09, LUMI-AI-Guide PR #118",
        "stack laif (default)",
        "module use /appl/local/csc/modulefiles",
        "1 GPU-hour = 1 hour of a full MI250X = 2 GCD-hours",
        "│ standard-g │ 2 days     │ ≤ 1024 nodes │ whole nodes",
        "4 GPU-hours per hour for each node, whole nodes",
    ):
        assert text in result.stdout, text
    missing = run(tmp_path, environ, "clusters", "show", "puti")
    assert missing.returncode == 2 and "HINT: did you mean 'puhti'?" in missing.stderr


def test_plan_help_names_options_and_environment_variables(
    tmp_path: Path, environ: dict[str, str]
) -> None:
    result = run(tmp_path, environ, "plan", "--help")
    assert result.returncode == 0
    for text in ("--gpus-per-node", "SCALETRAIN_CLUSTER", "SBATCH_ACCOUNT", "torchrun, srun"):
        assert text in result.stdout, text


def test_login_node_commands_run_where_torch_cannot_be_imported(
    tmp_path: Path, environ: dict[str, str]
) -> None:
    # A `torch` that fails on import stands for a login node without PyTorch.
    fake = tmp_path / "no-torch" / "torch"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text("raise ImportError('torch must not be imported here')\n")
    no_torch = {**environ, "PYTHONPATH": str(fake.parent)}
    for args in (
        ["clusters"],
        ["clusters", "show", "mahti"],
        ["plan", "-c", "lumi", "-g", "8", "-t", "1:00:00", "--json", "train.py"],
    ):
        result = run(tmp_path, no_torch, *args)
        assert result.returncode == 0, result.stderr
