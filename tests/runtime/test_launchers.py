"""Launcher detection from environment dicts: torchrun, variables set by hand (env), a single
process; one test per branch a user can hit."""

from __future__ import annotations

import pytest

from scaletrain.core.errors import LaunchEnvironmentError
from scaletrain.runtime.launchers import detect_layout
from tests.support.launcher_environments import SLURM_STEP, TORCHRUN


def test_torchrun_variables_give_the_full_layout() -> None:
    layout = detect_layout(TORCHRUN)
    assert layout.launcher == "torchrun"
    assert (layout.rank, layout.local_rank, layout.world_size) == (5, 1, 8)
    assert (layout.local_world_size, layout.node_rank, layout.num_nodes) == (4, 1, 2)
    assert (layout.master_addr, layout.master_port) == ("nid001", 29400)


def test_torchrun_wins_over_slurm_variables_under_srun_torchrun() -> None:
    layout = detect_layout({**SLURM_STEP, **TORCHRUN})
    assert layout.launcher == "torchrun"
    assert layout.rank == 5 and layout.master_addr == "nid001"


def test_hand_set_env_variables_without_torchrun_are_read_as_env() -> None:
    environ = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "MASTER_ADDR": "h1"}
    layout = detect_layout(environ)
    assert layout.launcher == "env"
    assert layout.local_world_size == 2 and layout.num_nodes == 1 and layout.node_rank == 0
    assert layout.master_port == 29500  # torchrun's default when MASTER_PORT is not set


def test_torchrun_nodes_with_different_process_counts_keep_group_rank_and_size() -> None:
    # torchrun --nproc-per-node=2 on two nodes and 4 on a third: the third node (GROUP_RANK=2
    # of GROUP_WORLD_SIZE=3) runs ranks 4..7, so rank // LOCAL_WORLD_SIZE is not its node.
    environ = {**TORCHRUN, "RANK": "5", "LOCAL_RANK": "1", "WORLD_SIZE": "8",
               "LOCAL_WORLD_SIZE": "4", "GROUP_RANK": "2", "GROUP_WORLD_SIZE": "3"}  # fmt: skip
    layout = detect_layout(environ)
    assert (layout.node_rank, layout.num_nodes) == (2, 3)
    # Hand-set variables name the node NODE_RANK (as Lightning does).
    hand_set = {"RANK": "5", "WORLD_SIZE": "8", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
                "NODE_RANK": "2", "MASTER_ADDR": "n1"}  # fmt: skip
    assert detect_layout(hand_set).node_rank == 2
    # Without a node count: 6 processes, at most 4 per node, need 2 nodes.
    six = {"RANK": "1", "WORLD_SIZE": "6", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4",
           "MASTER_ADDR": "n1"}  # fmt: skip
    assert (detect_layout(six).num_nodes, detect_layout(six).node_rank) == (2, 0)


def test_hand_set_single_process_needs_no_local_rank_or_master_addr() -> None:
    layout = detect_layout({"RANK": "0", "WORLD_SIZE": "1"})
    assert (layout.launcher, layout.local_rank, layout.local_world_size) == ("env", 0, 1)
    assert layout.master_addr == "127.0.0.1"


def test_lumi_seed_style_rank_from_slurm_localid() -> None:
    # 003_*: srun bash -c "RANK=$SLURM_PROCID ..." without LOCAL_RANK: SLURM_LOCALID fills in.
    environ = {**SLURM_STEP, "RANK": "5", "WORLD_SIZE": "8", "MASTER_ADDR": "nid005000"}
    environ.pop("SLURM_LOCALID")
    environ["SLURM_LOCALID"] = "1"
    layout = detect_layout(environ)
    assert layout.local_rank == 1 and layout.local_world_size == 4


def test_missing_local_rank_with_several_processes_names_the_variable() -> None:
    with pytest.raises(LaunchEnvironmentError, match="LOCAL_RANK is not set"):
        detect_layout({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h"})


def test_rank_not_below_world_size_names_both_variables() -> None:
    with pytest.raises(LaunchEnvironmentError) as caught:
        detect_layout({**TORCHRUN, "RANK": "8"})
    assert "RANK=8" in str(caught.value) and "WORLD_SIZE=8" in str(caught.value)
    assert "do not set RANK by hand" in caught.value.hint


def test_missing_master_addr_with_world_size_above_one_says_how_to_set_it() -> None:
    environ = {k: v for k, v in TORCHRUN.items() if k != "MASTER_ADDR"}
    with pytest.raises(LaunchEnvironmentError, match="MASTER_ADDR is not set") as caught:
        detect_layout(environ)
    assert "scontrol show hostnames" in caught.value.hint
    # Two processes need it as much as eight.
    with pytest.raises(LaunchEnvironmentError, match="MASTER_ADDR is not set, but 2 processes"):
        detect_layout({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"})


@pytest.mark.parametrize("missing", ["RANK", "WORLD_SIZE"])
def test_torchrun_without_rank_or_world_size_names_it(missing: str) -> None:
    with pytest.raises(LaunchEnvironmentError) as caught:
        detect_layout({k: v for k, v in TORCHRUN.items() if k != missing})
    assert caught.value.problem.startswith(f"{missing} is not set")
    assert "torchrun" in caught.value.hint


def test_world_size_below_one_is_named() -> None:
    with pytest.raises(LaunchEnvironmentError, match="WORLD_SIZE=0 must be at least 1") as caught:
        detect_layout({**TORCHRUN, "RANK": "0", "WORLD_SIZE": "0"})
    assert "WORLD_SIZE" in caught.value.hint


def test_non_integer_variable_is_named() -> None:
    with pytest.raises(LaunchEnvironmentError, match="WORLD_SIZE='eight'"):
        detect_layout({**TORCHRUN, "WORLD_SIZE": "eight"})


def test_local_rank_beyond_local_world_size() -> None:
    with pytest.raises(LaunchEnvironmentError, match=r"LOCAL_RANK=4 is outside 0\.\.3") as caught:
        detect_layout({**TORCHRUN, "LOCAL_RANK": "4"})
    assert "--nproc-per-node" in caught.value.hint


@pytest.mark.parametrize(("port", "valid"), [("0", False), ("1", True), ("65535", True),
                                             ("65536", False)])  # fmt: skip
def test_master_port_must_be_a_tcp_port(port: str, valid: bool) -> None:
    # TCP ports are 1..65535.
    environ = {**TORCHRUN, "MASTER_PORT": port}
    if valid:
        assert detect_layout(environ).master_port == int(port)
        return
    with pytest.raises(LaunchEnvironmentError) as caught:
        detect_layout(environ)
    assert caught.value.problem == f"MASTER_PORT={port} is not a valid TCP port."
    assert "29500" in caught.value.hint


def test_plain_python_is_a_single_process() -> None:
    layout = detect_layout({"HOME": "/root"})
    assert layout.launcher == "single"
    assert (layout.rank, layout.world_size, layout.local_world_size) == (0, 1, 1)
