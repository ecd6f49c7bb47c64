"""What Progress shows a language model's user: tokens/s, peak memory per rank, and MFU when
the cluster profile knows the GPU's peak (through the plan.toml a generated job leaves)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

import scaletrain as st
from scaletrain.clusters.catalog import load_profile
from scaletrain.core.run_folder import RunFolder
from scaletrain.planning.plan import write_plan
from scaletrain.planning.planner import plan_job
from scaletrain.planning.request import Request
from scaletrain.train.measures import transformer_flops_per_token


def test_tokens_per_second_peak_memory_and_mfu_from_the_plan(
    tmp_path: Path, single_process: st.DistEnv, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = RunFolder(tmp_path / "run").create()
    plan = plan_job(
        Request(cluster="mahti", script="train.py", time="1:00:00", gpus=4),
        load_profile("mahti", {}),
    )
    write_plan(plan, folder.plan)  # what `scaletrain submit` leaves in the run folder
    tokens_per_step = 8 * 1024  # 8 sequences of 1024 tokens
    flops_per_step = 1e12
    progress = st.Progress(
        4,
        samples_per_step=8,
        tokens_per_step=tokens_per_step,
        flops_per_step=flops_per_step,
        every=2,
        run_folder=folder,
    )
    for _ in range(4):
        progress.update(loss=2.0)
    summary = progress.finish()

    assert "tokens/s" in capsys.readouterr().out.splitlines()[0]
    assert summary["tokens_per_s"] == pytest.approx(summary["samples_per_s"] * 1024)
    achieved = 4 * flops_per_step / summary["elapsed_s"] / 1e12
    assert summary["tflops_per_gpu"] == pytest.approx(achieved, rel=1e-6)
    assert summary["mfu"] == pytest.approx(summary["tflops_per_gpu"] / 312)  # A100 bf16 peak
    assert len(summary["peak_memory_gb"]) == 1 and summary["peak_memory_gb"][0] > 0
    saved = json.loads(folder.metrics.joinpath("summary.json").read_text())
    assert saved["mfu"] == summary["mfu"]
    records = [json.loads(line) for line in folder.metrics.joinpath("train.jsonl").open()]
    assert all("tokens_per_s" in record for record in records)


def test_each_line_shows_the_mean_of_the_steps_since_the_last_one(
    tmp_path: Path, single_process: st.DistEnv
) -> None:
    # 600 steps a line: more than one partial sum holds (256), so partial sums add up too.
    every, lines = 600, 2
    folder = RunFolder(tmp_path / "run").create()
    progress = st.Progress(every * lines, samples_per_step=1, every=every, run_folder=folder)
    losses = torch.arange(every * lines, dtype=torch.float64) / 7
    for step, loss in enumerate(losses.tolist()):
        progress.update(
            loss=torch.tensor(loss, dtype=torch.float32, requires_grad=True) * 1,  # a graph
            accuracy=torch.tensor(loss, dtype=torch.bfloat16),
            lr=float(step),
        )
    records = [json.loads(line) for line in folder.metrics.joinpath("train.jsonl").open()]

    assert [record["step"] for record in records] == [every, 2 * every]
    for record, chunk in zip(records, losses.split(every), strict=True):
        assert record["loss"] == pytest.approx(chunk.mean().item(), rel=1e-6)
        bf16 = chunk.to(torch.bfloat16).double()
        assert record["accuracy"] == pytest.approx(bf16.mean().item(), rel=1e-9)
    assert [record["lr"] for record in records] == [(every - 1) / 2, every + (every - 1) / 2]


def test_a_tensor_changed_in_place_after_update_counts_as_it_was(
    tmp_path: Path, single_process: st.DistEnv
) -> None:
    folder = RunFolder(tmp_path / "run").create()
    progress = st.Progress(4, samples_per_step=1, every=4, run_folder=folder)
    seen = torch.zeros(())  # a counter the loop keeps and increments in place
    for _ in range(4):
        seen += 1
        progress.update(seen=seen)
    (record,) = [json.loads(line) for line in folder.metrics.joinpath("train.jsonl").open()]
    assert record["seen"] == (1 + 2 + 3 + 4) / 4


def test_without_a_known_peak_there_is_no_mfu(tmp_path: Path, single_process: st.DistEnv) -> None:
    progress = st.Progress(
        1, samples_per_step=1, flops_per_step=1e9, run_folder=RunFolder(tmp_path)
    )
    progress.update(loss=1.0)
    summary = progress.finish()
    assert "tflops_per_gpu" in summary and "mfu" not in summary


def test_flops_per_token_of_gpt2_small() -> None:
    # nanoGPT's estimate_mfu for GPT-2 small (124 M parameters, 12 layers, 768 wide, 1024
    # tokens): 6 N + 12 L H Q T with H Q = 768.
    flops = transformer_flops_per_token(
        parameters=124_000_000, layers=12, width=768, sequence_length=1024
    )
    assert flops == 6 * 124e6 + 12 * 12 * 768 * 1024
