"""Resuming in one process as a user meets it: the newest intact checkpoint is loaded, a
damaged one is named, set aside (never deleted) and the previous one tried, and a
checkpoint that does not fit the script is an error, not a silent fresh start."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
import torch
from torch import nn

from scaletrain.checkpoint.deepspeed_state import SECTION
from scaletrain.checkpoint.resume import load_newest
from scaletrain.checkpoint.state import TrainingObjects
from scaletrain.checkpoint.storage import open_storage
from scaletrain.checkpoint.writer import write_checkpoint
from scaletrain.core.errors import ScaletrainError
from tests.checkpoint.conftest import job_of, save_alone, target_alone


def saved_models(root: Path, storage: str, steps: tuple[int, ...]) -> dict[int, nn.Linear]:
    """A model saved at each of `steps`, its weights set to the step number."""
    models = {}
    for step in steps:
        model = nn.Linear(8, 4)
        with torch.no_grad():
            model.weight.fill_(step)
            model.bias.fill_(-step)
        save_alone(root, dict(model.state_dict()), storage=storage, step=step)
        models[step] = model
    return models


def test_nothing_to_resume_from_is_a_fresh_start(tmp_path: Path) -> None:
    assert load_newest(TrainingObjects(model=nn.Linear(8, 4)), target_alone(tmp_path)) is None


def test_the_newest_checkpoint_is_loaded_with_this_ranks_generators(
    tmp_path: Path, storage: str
) -> None:
    saved_models(tmp_path, storage, (10, 20))
    model = nn.Linear(8, 4)
    resumed = load_newest(TrainingObjects(model=model), target_alone(tmp_path))
    assert resumed is not None
    assert resumed.folder == tmp_path / "step-0000020" and resumed.manifest.position.step == 20
    assert torch.equal(model.weight, torch.full((4, 8), 20.0))
    assert torch.equal(model.bias, torch.full((4,), -20.0))
    assert resumed.rank_state is not None
    assert resumed.rank_state.keys() == job_of({}).rank_state.keys()


def test_a_damaged_checkpoint_is_set_aside_and_the_previous_one_loaded(
    tmp_path: Path, storage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    saved_models(tmp_path, storage, (10, 20))
    newest = tmp_path / "step-0000020"
    shard = next(newest.glob("*.distcp"))
    data = bytearray(shard.read_bytes())
    data[len(data) // 2] ^= 0xFF
    shard.write_bytes(bytes(data))
    model = nn.Linear(8, 4)
    capsys.readouterr()
    resumed = load_newest(TrainingObjects(model=model), target_alone(tmp_path))
    assert resumed is not None and resumed.folder == tmp_path / "step-0000010"
    assert torch.equal(model.weight, torch.full((4, 8), 10.0))
    assert (tmp_path / "step-0000020.damaged" / shard.name).read_bytes() == bytes(data)
    assert capsys.readouterr().err == (
        f"scaletrain: checkpoint {newest} is damaged: {shard.name} does not match its checksum. "
        "Renamed it to step-0000020.damaged; trying the previous one.\n"
    )


def test_a_missing_file_and_an_unreadable_manifest_are_named(
    tmp_path: Path, storage: str, capsys: pytest.CaptureFixture[str]
) -> None:
    saved_models(tmp_path, storage, (10, 20, 30))  # keep=2: 20 and 30 stay
    (tmp_path / "step-0000030" / "checkpoint.json").write_text("{")
    (tmp_path / "step-0000020" / ".metadata").unlink()
    capsys.readouterr()
    with pytest.raises(ScaletrainError) as raised:
        load_newest(TrainingObjects(model=nn.Linear(8, 4)), target_alone(tmp_path))
    assert str(raised.value) == (
        f"Every checkpoint in {tmp_path} is damaged (set aside as step-*.damaged); none was "
        "loaded, none was deleted, and the run does not start over by itself.\n"
        "HINT: look at the step-*.damaged folders (see the messages above); move the "
        "checkpoints folder away to start this run over, or restore a copy."
    )
    err = capsys.readouterr().err
    assert re.search(
        r"checkpoint \S+step-0000030 is damaged: "
        r"The checkpoint \S+ has an unreadable checkpoint.json",
        err,
    )
    assert f"checkpoint {tmp_path / 'step-0000020'} is damaged: .metadata is missing. " in err
    assert sorted(path.name for path in tmp_path.glob("step-*")) == [
        "step-0000020.damaged",
        "step-0000030.damaged",
    ]
    # A restart finds only what was set aside: still an error, not a fresh start.
    with pytest.raises(ScaletrainError, match="Every checkpoint in"):
        load_newest(TrainingObjects(model=nn.Linear(8, 4)), target_alone(tmp_path))


def test_an_intact_checkpoint_that_does_not_fit_the_model_is_an_error(
    tmp_path: Path, storage: str
) -> None:
    saved_models(tmp_path, storage, (10,))
    with pytest.raises(ScaletrainError) as raised:
        load_newest(TrainingObjects(model=nn.Linear(8, 5)), target_alone(tmp_path))
    message = str(raised.value)
    assert message.startswith(
        f"The checkpoint {tmp_path / 'step-0000010'} is intact but does not fit this "
        "training script: "
    )
    assert "CheckpointException" in message  # DCP's own words follow, naming what differs
    assert raised.value.hint == (
        "resume with the model, optimizer, scheduler and scaler that saved it, or start a new "
        "run (another --name); move the checkpoints folder away to start over."
    )
    assert (tmp_path / "step-0000010").is_dir()  # nothing set aside or deleted


def test_a_checkpoint_of_deepspeed_into_a_torch_native_model_names_both_and_the_way_out(
    tmp_path: Path, storage: str
) -> None:
    """A DeepSpeed engine's state sits under its own section of the checkpoint (what
    deepspeed_state.py saves); a DDP/FSDP/one-process run cannot load it."""
    root = tmp_path / "runs" / "train" / "checkpoints"
    target = target_alone(root)
    partitions = {"module": {"layer": {"weight": torch.ones(4, 8)}}}
    job = dataclasses.replace(job_of({}, step=10), state={SECTION: partitions})
    write_checkpoint(job, target, open_storage(storage, target, pin=False, asynchronous=False))
    with pytest.raises(ScaletrainError) as raised:
        load_newest(TrainingObjects(model=nn.Linear(8, 4)), target)
    assert raised.value.problem == (
        f"The checkpoint {root / 'step-0000010'} was saved by DeepSpeed ZeRO (strategy zero1, "
        "zero2 or zero3), and this run trains with DDP, FSDP, HSDP or one process: DeepSpeed "
        "keeps weights and optimizer state in flat partitions of its own, and the two layouts "
        "do not load into each other."
    )
    assert raised.value.hint == (
        "resume this run with strategy='zero1', 'zero2' or 'zero3' (any of them, at any number "
        f"of processes). To switch, `scaletrain export --runs-dir {tmp_path / 'runs'} train` "
        "writes its weights as one file: load that into your model before st.wrap and start a "
        "new run (another --name); the optimizer starts afresh."
    )
    assert (root / "step-0000010").is_dir()  # nothing set aside or deleted
