"""Saves in one process through the direct storage's parts, as its asynchronous saves make
them (with a file image) or as its synchronous ones do."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import torch

from scaletrain.checkpoint.direct.file_image import FileImage
from scaletrain.checkpoint.direct.plan_cache import PlanCache
from scaletrain.checkpoint.direct.storage import write_share
from scaletrain.checkpoint.storage import direct_unusable_because
from scaletrain.checkpoint.writer import dcp_state, publish
from tests.checkpoint.conftest import job_of, target_alone

HERE = Path(__file__).parent


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Off its tested torch versions the direct storage is never used (saves go through DCP),
    so its parts are not tested there either."""
    unusable = direct_unusable_because(torch.__version__)
    if unusable is not None:
        for item in items:
            if item.path.is_relative_to(HERE):
                item.add_marker(pytest.mark.skip(reason=f"the direct storage {unusable}"))


def save_alone(
    root: Path,
    state: dict[str, torch.Tensor],
    cores: int,
    *,
    step: int = 5,
    image: FileImage | None = None,
) -> Path:
    """Save `state` in one process (with an `image`: as an asynchronous save writes it)."""
    target = target_alone(root, cores)
    job = job_of(state, step)
    plans = PlanCache(rank=0, world_size=1, group=None)
    folder = target.store.partial(step)
    files = write_share(dcp_state(job, target), folder, plans, cores=cores, image=image)
    published = publish(job, target, files, time.perf_counter())
    assert published is not None
    return published
