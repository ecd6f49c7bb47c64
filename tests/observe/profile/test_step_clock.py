"""The step clock of `scaletrain scale`: every optimizer step of an unchanged script timed,
the script ended after the study's steps, and the times read back without torch."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from scaletrain.observe.profile.step_clock import StepClock
from scaletrain.observe.profile.step_clock_files import read_step_ends, steps_file


def test_each_optimizer_step_is_timed_and_the_script_ends_after_the_last(tmp_path: Path) -> None:
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    clock = StepClock(tmp_path, rank=1, world_size=2, stop_after=3)
    steps = 0
    with pytest.raises(SystemExit) as ended:
        for _ in range(10):  # the script would run 10 steps; the study needs 3
            model(torch.ones(2, 4)).sum().backward()
            optimizer.step()
            steps += 1
    assert ended.value.code == 0 and steps == 2  # the third step's hook ended it
    record = json.loads(steps_file(tmp_path, 1).read_text())
    assert (record["rank"], record["world_size"]) == (1, 2)
    ends = read_step_ends(tmp_path)[1]
    assert len(ends) == 3 and ends == sorted(ends) and ends[0] >= record["started"]
    # Its hook is gone: later steps (another optimizer, a test after this one) are not timed.
    optimizer.step()
    clock.save()
    assert len(read_step_ends(tmp_path)[1]) == 3


def test_every_ranks_step_times_by_rank(tmp_path: Path) -> None:
    for rank, ends in ((10, [5.0, 6.5]), (2, [5.1, 6.4, 7.9])):
        record = {"rank": rank, "world_size": 16, "host": "n1", "started": 4.0, "step_ends": ends}
        steps_file(tmp_path, rank).write_text(json.dumps(record) + "\n", encoding="utf-8")
    (tmp_path / "monitor-n1.jsonl").write_text("", encoding="utf-8")
    assert read_step_ends(tmp_path) == {2: [5.1, 6.4, 7.9], 10: [5.0, 6.5]}
    assert read_step_ends(tmp_path / "missing") == {}
