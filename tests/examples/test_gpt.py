"""The GPT example as its README runs it: FSDP with bf16, activation checkpointing and
accumulation through `scaletrain run`; ZeRO-3 under DeepSpeed's own launcher and under srun
(a generated DeepSpeed job on the test Slurm); the export loads into the plain model."""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest
import torch

from tests.conftest import PROCESS_TIMEOUT_S, REPO, clean_environ, free_port, scaletrain
from tests.support.slurm_cluster import SlurmCluster
from tests.support.slurm_jobs import finished, job_environ, submit, submit_options

pytestmark = [pytest.mark.multiprocess, pytest.mark.long]

EXAMPLE = REPO / "examples" / "gpt"
# Documented in examples/gpt/README.md for the stand-in (ln 256 = 5.55 before training):
# validation loss after the first and the second (last, by default) epoch.
DOCUMENTED_VAL_LOSS = {1: 3.5, 2: 3.2}


def example_module(name: str) -> ModuleType:
    """One of the example's modules, imported as the script imports it."""
    spec = importlib.util.spec_from_file_location(f"gpt_example_{name}", EXAMPLE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while it loads
    spec.loader.exec_module(module)
    return module


def test_fsdp_bf16_recompute_and_accumulate_then_export(tmp_path: Path) -> None:
    data = tmp_path / "data"
    options = ["--strategy", "fsdp", "--precision", "bf16", "--activation-checkpointing"]
    result = scaletrain(
        "run", "--nproc", "2", "--name", "gpt", str(EXAMPLE / "train.py"),
        "--data-dir", str(data), "--create-small-data", *options, "--accumulation-steps", "2",
        "--epochs", "1", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    meta = json.loads((data / "meta.json").read_text())
    assert (data / "train.bin").stat().st_size == 2 * meta["train_tokens"]  # uint16 tokens
    summary = json.loads((tmp_path / "runs/gpt/metrics/summary.json").read_text())
    assert summary["val_loss"] < DOCUMENTED_VAL_LOSS[1]
    assert summary["tokens_per_s"] == pytest.approx(summary["samples_per_s"] * 64)
    assert len(summary["peak_memory_gb"]) == 2 and "tokens/s" in result.stdout

    export = scaletrain("export", "gpt", cwd=tmp_path)
    assert export.returncode == 0, export.stderr
    model_module, data_module = example_module("model"), example_module("data")
    config = model_module.GPTConfig(vocab_size=256, block_size=64, layers=2, heads=4, width=64)
    model = model_module.GPT(config)
    model.load_state_dict(torch.load(tmp_path / export.stdout.strip(), weights_only=True))
    val = data_module.TokenBlocks(data / "val.bin", 64)
    pairs = [val[index] for index in range(len(val))]
    inputs = torch.stack([pair[0] for pair in pairs])
    targets = torch.stack([pair[1] for pair in pairs])
    with torch.no_grad():
        loss = float(model(inputs, targets))
    # The same weights in float32 on one process: the loss the run reported in bf16.
    assert loss == pytest.approx(summary["val_loss"], abs=0.05)


def test_zero3_under_the_deepspeed_launcher(tmp_path: Path) -> None:
    command = [
        str(Path(sys.executable).with_name("deepspeed")), "--num_gpus", "2",
        "--master_port", str(free_port()),
        str(EXAMPLE / "train.py"), "--data-dir", str(tmp_path / "data"), "--create-small-data",
        "--deepspeed", "--deepspeed_config", str(EXAMPLE / "ds_zero3.json"),
        "--device", "cpu",  # the launcher sets CUDA_VISIBLE_DEVICES=0,1 without GPUs too
    ]  # fmt: skip
    result = subprocess.run(
        command,
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT_S,
        cwd=tmp_path,
        env=clean_environ(),
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "strategy deepspeed, fp32" in result.stdout  # the config decides: ZeRO-3, bf16
    loss = re.search(r"finished: .*val_loss ([\d.]+)", result.stdout)
    assert loss is not None, result.stdout[-3000:]
    assert float(loss.group(1)) < DOCUMENTED_VAL_LOSS[2]


@pytest.mark.slurm
def test_zero3_one_slurm_task_per_gpu(slurm_cluster: SlurmCluster, tmp_path: Path) -> None:
    environ = job_environ(slurm_cluster, tmp_path)
    options = submit_options("gpt-zero3", "deepspeed", 2, 1, "--no-check")
    command = (
        # `--`: the script's own --precision, not submit's.
        str(EXAMPLE / "train.py"), "--", "--data-dir", str(tmp_path / "data"),
        "--create-small-data", "--strategy", "zero3", "--precision", "bf16", "--epochs", "1",
    )  # fmt: skip
    folder, job_id = submit(slurm_cluster, tmp_path, environ, options, *command)
    output = finished(slurm_cluster, folder, job_id)
    # The DeepSpeed job sets torch's variables from Slurm's in each task (CSC's layout); they
    # repeat the task's own SLURM_* values, so st.init() reads the layout as Slurm's.
    assert "2 process(es) on 2 nodes via slurm" in output
    summary = json.loads((folder.metrics / "summary.json").read_text())
    history = [json.loads(line) for line in folder.metrics.joinpath("train.jsonl").open()]
    assert history[-1]["loss"] < history[0]["loss"]
    assert summary["val_loss"] < DOCUMENTED_VAL_LOSS[1]
