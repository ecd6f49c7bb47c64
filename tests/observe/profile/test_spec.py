"""`--profile RANKS[:WAIT,WARMUP,ACTIVE]`: the text a user types, the ranks and steps it
means, and the same text in SCALETRAIN_PROFILE for every training process."""

from __future__ import annotations

import pytest

from scaletrain.core.errors import ScaletrainError
from scaletrain.core.variables import PROFILE
from scaletrain.observe.profile.spec import ProfileSpec, parse_profile, profile_from


def test_ranks_and_schedule_from_the_option() -> None:
    assert parse_profile("all") == ProfileSpec()
    assert parse_profile(" all ") == ProfileSpec()
    # Ranks sorted, each once; the schedule in optimizer steps.
    assert parse_profile("3,0,3:10,1,2") == ProfileSpec(ranks=(0, 3), wait=10, warmup=1, active=2)
    assert parse_profile("1") == ProfileSpec(ranks=(1,))
    assert parse_profile("all:0,0,1") == ProfileSpec(wait=0, warmup=0, active=1)


def test_which_ranks_record_and_for_how_many_steps() -> None:
    chosen = parse_profile("0,3:10,1,2")
    assert [rank for rank in range(5) if chosen.includes(rank)] == [0, 3]
    assert all(ProfileSpec().includes(rank) for rank in range(64))
    # The profiler stops itself after wait + warmup + active steps.
    assert chosen.total_steps == 13
    assert ProfileSpec().total_steps == 10


def test_the_text_travels_unchanged_to_the_processes() -> None:
    for text in ("all:5,2,3", "0,3:10,1,2", "7:0,0,1"):
        spec = parse_profile(text)
        assert spec.to_text() == text
        assert profile_from({PROFILE: spec.to_text()}) == spec
    assert profile_from({}) is None
    assert profile_from({PROFILE: ""}) is None


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("zero", "is not RANKS[:WAIT,WARMUP,ACTIVE]"),
        ("0,x", "is not RANKS[:WAIT,WARMUP,ACTIVE]"),
        ("0:1,two,3", "is not RANKS[:WAIT,WARMUP,ACTIVE]"),
        ("-1", "names a negative rank"),
        ("0:1,2", "needs three schedule numbers"),
        ("0:1,2,3,4", "needs three schedule numbers"),
        ("0:1,2,0", "is not wait >= 0, warmup >= 0, active >= 1 steps"),
        ("0:-1,2,3", "is not wait >= 0, warmup >= 0, active >= 1 steps"),
    ],
)
def test_a_wrong_option_says_what_to_write(text: str, says: str) -> None:
    with pytest.raises(ScaletrainError, match=r"profile") as raised:
        parse_profile(text)
    assert says in raised.value.problem
    assert "--profile 0,3:5,2,3" in raised.value.hint
