"""Checkpoints of every strategy resume at another world size, and export to one file.

A run saves after its first epoch with W processes and continues its second epoch with W'
processes and another strategy (FSDP and HSDP into each other, DDP into FSDP and back;
ZeRO-1 as ZeRO-3 and ZeRO-2 as ZeRO-1, which covers both of DeepSpeed's partition layouts):
its losses must be those of one process that never stopped, and the export must give that
process's final weights, whatever sharding saved them. Between DeepSpeed and the torch-native
strategies a resume is refused with the way round it.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import torch

from scaletrain.checkpoint.export import export_model, read_model
from scaletrain.checkpoint.storage import STORAGES
from tests.conftest import REPO, WORKERS, scaletrain, torchrun
from tests.support.torch_features import gloo_all_reduce_averages

pytestmark = [pytest.mark.multiprocess, pytest.mark.long]

WORKER = WORKERS / "strategy_resume.py"
STEPS_PER_EPOCH = 4
# Float32 sums in another order (other shards) differ in the last bits only.
RTOL, ATOL = 1e-5, 1e-5

# (processes, st.wrap options) before and after; the global batch of 12 splits over 1-4.
ROUND_TRIPS: dict[str, tuple[tuple[int, dict[str, Any]], tuple[int, dict[str, Any]]]] = {
    "fsdp-2-to-hsdp-4": ((2, {"strategy": "fsdp"}), (4, {"strategy": "hsdp", "shard_size": 2})),
    "hsdp-4-to-fsdp-2": ((4, {"strategy": "hsdp", "shard_size": 2}), (2, {"strategy": "fsdp"})),
    # Outgrowing DDP mid-run, and back to whole weights on every rank.
    "ddp-2-to-fsdp-3": ((2, {"strategy": "ddp"}), (3, {"strategy": "fsdp"})),
    "fsdp-3-to-ddp-2": ((3, {"strategy": "fsdp"}), (2, {"strategy": "ddp"})),
    "zero1-3-to-zero3-2": ((3, {"strategy": "zero1"}), (2, {"strategy": "zero3"})),
    "zero2-2-to-zero1-3": ((2, {"strategy": "zero2"}), (3, {"strategy": "zero1"})),
    # Saved in the background (every 2 steps, the last at step 4): each rank's file built in
    # memory from its shards, and from the DeepSpeed partitions staged at the step boundary.
    "fsdp-2-async-to-ddp-3": (
        (2, {"strategy": "fsdp", "checkpointer": {"asynchronous": True, "every_steps": 2}}),
        (3, {"strategy": "ddp"}),
    ),
    "zero2-2-async-to-zero3-3": (
        (2, {"strategy": "zero2", "checkpointer": {"asynchronous": True, "every_steps": 2}}),
        (3, {"strategy": "zero3"}),
    ),
}


def start(
    run: Path, nproc: int, options: dict[str, Any], epochs: int
) -> subprocess.CompletedProcess[str]:
    return torchrun(
        WORKER,
        f"--run-dir={run}",
        f"--epochs={epochs}",
        f"--options={json.dumps(options)}",
        nproc=nproc,
    )


def train(run: Path, nproc: int, options: dict[str, Any], epochs: int) -> str:
    result = start(run, nproc, options, epochs)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stderr


def losses(run: Path) -> list[float]:
    lines = [json.loads(line) for line in (run / "losses.jsonl").read_text().splitlines()]
    return [line["loss"] for line in lines]


def export(runs: Path, name: str) -> dict[str, torch.Tensor]:
    """What `scaletrain export` writes, read in this process (the command is tested below)."""
    return read_model(runs / name / "checkpoints" / "step-0000008")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("runs")
    train(folder / "uninterrupted", 1, {}, epochs=2)
    return folder


def on_storage(options: dict[str, Any], storage: str) -> dict[str, Any]:
    """`options` with the Checkpointer on `storage`."""
    return options | {"checkpointer": options.get("checkpointer", {}) | {"storage": storage}}


@pytest.mark.parametrize("storage", STORAGES)
@pytest.mark.parametrize("name", ROUND_TRIPS)
def test_resume_at_another_world_size_continues_the_curve_and_exports(
    runs: Path, name: str, storage: str
) -> None:
    (before, options_before), (after, options_after) = ROUND_TRIPS[name]
    if "hsdp" in name and not gloo_all_reduce_averages():
        pytest.skip("this torch's gloo cannot average an all-reduce, so HSDP is refused on CPU "
                    "(tests/train/test_fsdp_averaging.py)")  # fmt: skip
    run = f"{name}-{storage}"
    train(runs / run, before, on_storage(options_before, storage), epochs=1)
    resumed = train(runs / run, after, on_storage(options_after, storage), epochs=2)
    # The save at the end of the epoch records the next epoch; one every 2 steps, made at the
    # epoch's last step, records that epoch with all its batches done.
    epoch = 0 if "checkpointer" in options_before else 1
    assert f"(step 4, epoch {epoch}, saved by {before} process(es), now {after})" in resumed
    reference = losses(runs / "uninterrupted")
    assert len(losses(runs / run)) == len(reference) == 2 * STEPS_PER_EPOCH
    assert losses(runs / run) == pytest.approx(reference, rel=RTOL)

    exported, expected = export(runs, run), export(runs, "uninterrupted")
    assert exported.keys() == expected.keys()
    for key, tensor in expected.items():
        assert exported[key].shape == tensor.shape, key  # DeepSpeed's flat slices reshaped
        torch.testing.assert_close(exported[key], tensor, rtol=RTOL, atol=ATOL)


# A checkpoint resumed by the other family of strategies: the run that saved it (the
# uninterrupted single process; the ZeRO round trip above, whose newest is ZeRO-1's),
# processes and options now, and what the error says.
REFUSED_MOVES: dict[str, tuple[str, int, dict[str, Any], str, str]] = {
    "one-1-to-zero2-2": (
        "uninterrupted",
        2,
        {"strategy": "zero2"},
        "saved by DDP, FSDP, HSDP or one process, and this run trains with DeepSpeed ZeRO",
        "resume this run with strategy='ddp', 'fsdp' or 'hsdp'",
    ),
    "zero1-3-to-fsdp-2": (
        "zero2-2-to-zero1-3-dcp",
        2,
        {"strategy": "fsdp"},
        "saved by DeepSpeed ZeRO (strategy zero1, zero2 or zero3), and this run trains with DDP",
        "resume this run with strategy='zero1', 'zero2' or 'zero3'",
    ),
}


@pytest.mark.parametrize("name", REFUSED_MOVES)
def test_deepspeed_and_torch_native_checkpoints_are_refused_with_the_fix(
    runs: Path, name: str
) -> None:
    source, nproc, options, problem, fix = REFUSED_MOVES[name]
    shutil.copytree(runs / source / "checkpoints", runs / name / "checkpoints")
    result = start(runs / name, nproc, options, epochs=3)
    assert result.returncode != 0
    assert problem in result.stderr
    assert f"HINT: {fix}" in result.stderr
    assert f"`scaletrain export --runs-dir {runs} {name}`" in result.stderr
    # Refused, not set aside as damaged: the run resumes with the right strategy.
    checkpoints = runs / name / "checkpoints"
    assert (checkpoints / "LATEST").read_text().strip() == "step-0000008"
    assert (checkpoints / "step-0000008" / "checkpoint.json").is_file()
    assert not list(checkpoints.glob("*.damaged"))


def test_export_names_the_checkpoints_there_are(runs: Path) -> None:
    result = scaletrain(
        "export", "--runs-dir", str(runs), "uninterrupted", "--checkpoint", "step-9", cwd=REPO
    )
    assert result.returncode == 2
    assert "has no checkpoint step-9 to export" in result.stderr
    assert "(there: step-0000008)" in result.stderr


def test_export_command_writes_one_file_beside_the_run(runs: Path) -> None:
    result = scaletrain("export", "--runs-dir", str(runs), "zero1-3-to-zero3-2-dcp", cwd=REPO)
    assert result.returncode == 0, result.stderr
    path = runs / "zero1-3-to-zero3-2-dcp" / "export" / "model-step-0000008.pt"
    assert result.stdout == f"{path}\n"  # for scripts; people read the line on stderr
    assert "21 tensors, 4,368 values" in result.stderr
    assert "assuming the intent is to" not in result.stderr  # DCP's single-process notice
    weights = torch.load(path, weights_only=True)
    for key, tensor in export(runs, "uninterrupted").items():
        torch.testing.assert_close(weights[key], tensor, rtol=RTOL, atol=ATOL)
    as_json = scaletrain(
        "export", "--runs-dir", str(runs), "zero1-3-to-zero3-2-dcp", "--json", cwd=REPO
    )
    assert as_json.returncode == 0, as_json.stderr
    record = json.loads(as_json.stdout)
    assert (record["path"], record["tensors"], record["values"]) == (str(path), 21, 4368)
    assert record["bytes"] == path.stat().st_size


def test_export_as_safetensors_in_bf16(runs: Path) -> None:
    from safetensors.torch import load_file

    output = runs / "model.safetensors"
    exported = export_model(
        runs / "uninterrupted" / "checkpoints" / "step-0000008", output, dtype="bf16"
    )
    loaded = load_file(output)
    assert (
        exported.tensors == len(loaded)
        and not output.with_name("model.safetensors.partial").exists()
    )
    assert {tensor.dtype for tensor in loaded.values()} == {torch.bfloat16}
    assert loaded.keys() == export(runs, "uninterrupted").keys()
