"""The rehearsal's plan (`submit --rehearse`): the profile's debug partition, the real shape
scaled down to its limits (and said so), a short time."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from scaletrain.clusters.catalog import load_profile
from scaletrain.core.errors import ScaletrainError
from scaletrain.planning.planner import plan_job
from scaletrain.planning.rehearsal import RehearsalRequest, rehearsal_request
from scaletrain.planning.request import Request
from tests.clusters.site_files import MINIMAL, user_site


def rehearsal_of(
    cluster: str, *, rehearsal_time: str | None = None, **asked: Any
) -> tuple[RehearsalRequest, dict[str, int | str]]:
    """The rehearsal request of a real request, and the rehearsal's plan in a few fields."""
    profile = load_profile(cluster, {})
    request = Request(cluster=cluster, script="train.py", time="12:00:00", **asked)
    found = rehearsal_request(request, plan_job(request, profile), profile, time=rehearsal_time)
    plan = plan_job(found.request, profile)
    shape: dict[str, int | str] = {
        "partition": plan.partition,
        "nodes": plan.nodes,
        "gpus_per_node": plan.gpus_per_node,
        "time_seconds": plan.time_seconds,
    }
    return found, shape


def test_lumi_rehearses_64_nodes_on_32_of_dev_g_for_15_minutes() -> None:
    found, plan = rehearsal_of("lumi", gpus=512)
    assert plan == {"partition": "dev-g", "nodes": 32, "gpus_per_node": 8, "time_seconds": 900}
    assert found.notes == (
        "scaled down from 64 node(s) × 8 to 32 × 8: dev-g takes at most 32 node(s)",
    )


def test_puhti_and_mahti_rehearse_on_gputest_within_its_gpus() -> None:
    found, plan = rehearsal_of("puhti", gpus=16)
    assert plan == {"partition": "gputest", "nodes": 2, "gpus_per_node": 4, "time_seconds": 900}
    assert found.notes == (
        "scaled down from 4 node(s) × 4 to 2 × 4: gputest takes at most 2 node(s), 8 GPUs",
    )
    found, plan = rehearsal_of("mahti", gpus=12)
    assert plan == {"partition": "gputest", "nodes": 1, "gpus_per_node": 4, "time_seconds": 900}
    assert "to 1 × 4: gputest takes at most 1 node(s), 4 GPUs" in found.notes[0]


def test_a_job_that_fits_keeps_its_shape_and_says_nothing() -> None:
    found, plan = rehearsal_of("local", nodes=2, gpus_per_node=2)
    assert plan == {"partition": "debug", "nodes": 2, "gpus_per_node": 2, "time_seconds": 900}
    assert found.notes == ()
    # The real request is unchanged but for partition, shape and time.
    assert found.request.script == "train.py" and found.request.mode == "torchrun"


def test_the_per_gpu_batch_stays_as_in_the_real_job() -> None:
    found, _ = rehearsal_of("puhti", gpus=16, global_batch_size=256)
    assert found.request.global_batch_size == 128  # 16 per GPU on 8 GPUs, as on 16
    assert "global batch 128 instead of 256: 16 per GPU" in found.notes[1]


def test_a_rehearsal_time_of_your_own_within_the_partition() -> None:
    _, plan = rehearsal_of("lumi", gpus=8, rehearsal_time="30:00")
    assert plan["time_seconds"] == 1800
    with pytest.raises(ScaletrainError) as caught:
        rehearsal_of("puhti", gpus=4, rehearsal_time="30:00")
    assert caught.value.problem == "--rehearsal-time 30:00 is longer than gputest allows (0:15:00)."
    assert caught.value.hint == "give --rehearsal-time 0:15:00 or less, or leave it out."


def test_a_site_without_a_rehearsal_partition_says_how_to_name_one(tmp_path: Path) -> None:
    profile = load_profile("site", user_site(tmp_path, "site", MINIMAL))
    request = Request(cluster="site", script="train.py", time="1:00:00", gpus=4)
    with pytest.raises(ScaletrainError) as caught:
        rehearsal_request(request, plan_job(request, profile), profile)
    assert caught.value.problem == "site names no partition for rehearsals."
    assert "add `rehearsal = true` to its short debug partition" in caught.value.hint
