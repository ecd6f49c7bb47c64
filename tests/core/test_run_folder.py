"""Choosing a run folder by name, by path, or the newest one."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from scaletrain.core.errors import ScaletrainError
from scaletrain.core.run_folder import RunFolder, find_run


def test_without_a_name_the_newest_run_is_chosen(tmp_path: Path) -> None:
    old, new = RunFolder(tmp_path / "b-old").create(), RunFolder(tmp_path / "a-new").create()
    os.utime(old.root, (1_000_000, 1_000_000))
    os.utime(new.root, (2_000_000, 2_000_000))
    (tmp_path / "notes.txt").write_text("files beside the runs are not runs")
    assert find_run(tmp_path, None) == new
    assert find_run(tmp_path, "b-old") == old


def test_a_path_to_the_run_works_as_well_as_its_name(tmp_path: Path) -> None:
    run = RunFolder(tmp_path / "runs" / "mnist").create()
    assert find_run(tmp_path / "runs", f"{run.root}/") == run  # as tab completion writes it


def test_an_unknown_name_lists_the_newest_runs(tmp_path: Path) -> None:
    for index in range(7):
        RunFolder(tmp_path / f"run-{index}").create()
        os.utime(tmp_path / f"run-{index}", (1_000_000 + index, 1_000_000 + index))
    with pytest.raises(ScaletrainError) as caught:
        find_run(tmp_path, "run-9")
    assert "newest first: run-6, run-5, run-4, run-3, run-2" in caught.value.hint
