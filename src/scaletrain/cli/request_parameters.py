"""The resource request options of `plan` and `submit`, declared once: the script, its
arguments, --cluster, --gpus, the software, what the job adds, and the model."""

from __future__ import annotations

import typer

from scaletrain.cli.common import SCRIPT_ARGUMENT
from scaletrain.planning.modes import DEFAULT_MODE, launch_modes

_MODEL_PANEL = "Model (memory estimate)"


def request_parameters(
    script: str = SCRIPT_ARGUMENT,
    cluster: str = typer.Option(
        ..., "--cluster", "-c", envvar="SCALETRAIN_CLUSTER", help="Cluster profile, e.g. lumi."
    ),
    time: str = typer.Option(
        ...,
        "--time",
        "-t",
        help="Wall time: H:MM:SS (2:00:00), D-HH:MM:SS, or minutes (30); Slurm reads 1:00 "
        "as one minute.",
    ),
    gpus: int | None = typer.Option(None, "--gpus", "-g", help="GPUs in total (whole nodes)."),
    nodes: int | None = typer.Option(None, "--nodes", "-N", help="Nodes (with --gpus-per-node)."),
    gpus_per_node: int | None = typer.Option(None, "--gpus-per-node", help="GPUs on each node."),
    partition: str | None = typer.Option(
        None, "--partition", "-p", help="Partition; chosen for you when left out."
    ),
    mode: str = typer.Option(
        DEFAULT_MODE,
        "--mode",
        "-m",
        envvar="SCALETRAIN_MODE",
        help=f"How processes start: {', '.join(launch_modes())}.",
    ),
    cpus_per_gpu: int | None = typer.Option(
        None, "--cpus-per-gpu", help="Cores per GPU (default: the cluster's fair share)."
    ),
    memory_per_gpu: int | None = typer.Option(
        None, "--memory-per-gpu", help="Memory per GPU in GB (default: the cluster's)."
    ),
    global_batch_size: int | None = typer.Option(
        None, "--global-batch-size", help="Samples per step over all GPUs; must split evenly."
    ),
    accumulation_steps: int = typer.Option(
        1, "--accumulation-steps", help="Gradient accumulation steps per optimizer step."
    ),
    account: str | None = typer.Option(
        None,
        "--account",
        "-A",
        envvar=["SCALETRAIN_ACCOUNT", "SBATCH_ACCOUNT"],
        help="Project to bill, e.g. project_465000000.",
    ),
    job_name: str | None = typer.Option(None, "--job-name", help="Slurm job name."),
    stack: str | None = typer.Option(
        None, "--stack", help="The cluster's software stack to use (see `clusters show`)."
    ),
    container: str | None = typer.Option(
        None, "--container", help="Container image to run in (e.g. a .sif file)."
    ),
    venv: str | None = typer.Option(
        None,
        "--venv",
        help="Your venv, activated after the module load or put first on PATH in the "
        "container; 'none' for none. Default: the venv this command runs from (modules only).",
    ),
    squashfs: str | None = typer.Option(
        None, "--squashfs", help="Your venv packed with mksquashfs, mounted in the container."
    ),
    bind: list[str] = typer.Option(
        [],
        "--bind",
        metavar="SRC[:DEST[:OPTS]]",
        help="Also bind this into the container (src[:dest[:opts]]); repeatable.",
    ),
    env: list[str] = typer.Option(
        [],
        "--env",
        metavar="NAME=VALUE",
        help="Export NAME=VALUE in the job, exactly as written; repeatable.",
    ),
    env_expand: list[str] = typer.Option(
        [],
        "--env-expand",
        metavar="NAME=VALUE",
        help="Export NAME=VALUE with $VARIABLES expanded when the job runs; repeatable.",
    ),
    setup: list[str] = typer.Option(
        [], "--setup", metavar="LINE", help="A shell line run after the software setup; repeatable."
    ),
    before: list[str] = typer.Option(
        [],
        "--before",
        metavar="COMMAND",
        help="A command run once on every node before training; repeatable.",
    ),
    after: list[str] = typer.Option(
        [],
        "--after",
        metavar="COMMAND",
        help="A command run once on every node after training; repeatable.",
    ),
    sbatch: list[str] = typer.Option(
        [],
        "--sbatch",
        metavar="OPTION",
        help="Another #SBATCH option, e.g. --sbatch=--exclusive; repeatable.",
    ),
    launcher_arg: list[str] = typer.Option(
        [],
        "--launcher-arg",
        metavar="ARG",
        help="A flag for the launcher (torchrun, accelerate; srun in per-GPU modes); repeatable.",
    ),
    visible_gpus: str | None = typer.Option(
        None,
        "--visible-gpus",
        help="srun mode: 'node' (each task sees every GPU of its node; for scripts that pick "
        "cuda:<LOCAL_RANK>) or 'own' (only its own, as cuda:0). Default: read from the script.",
    ),
    local_rank_arg: str | None = typer.Option(
        None,
        "--local-rank-arg",
        metavar="yes|no",
        help="deepspeed mode: pass the script --local_rank=N, as deepspeed's launcher does. "
        "Default: when the script's argument parser takes it.",
    ),
    precision: str | None = typer.Option(
        None,
        "--precision",
        help="bf16, fp16 or fp32: accelerate's --mixed_precision (other launchers take none: "
        "your script sets it) and the memory estimate's (default bf16).",
    ),
    model_params: str | None = typer.Option(
        None,
        "--model-params",
        help="Parameters of your model (124M, 1.3B): memory per GPU under each strategy.",
        rich_help_panel=_MODEL_PANEL,
    ),
    layers: int | None = typer.Option(
        None,
        "--layers",
        help="Transformer layers (activations need all three).",
        rich_help_panel=_MODEL_PANEL,
    ),
    width: int | None = typer.Option(
        None, "--width", help="Hidden size (d_model).", rich_help_panel=_MODEL_PANEL
    ),
    seq_len: int | None = typer.Option(
        None, "--seq-len", help="Tokens per sample.", rich_help_panel=_MODEL_PANEL
    ),
    activation_checkpointing: bool = typer.Option(
        False,
        "--activation-checkpointing",
        help="Blocks recompute their activations.",
        rich_help_panel=_MODEL_PANEL,
    ),
) -> None:
    """Never called: its signature is the request options (cli/request_options.py)."""
