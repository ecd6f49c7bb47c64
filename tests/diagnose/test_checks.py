"""The preflight's single checks on given values: no processes needed."""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace

from scaletrain.diagnose.preflight.devices import check_devices
from scaletrain.diagnose.preflight.gpu import (
    check_communication,
    gpu_identity,
    loaded_net_plugins,
)
from scaletrain.diagnose.preflight.inputs import parse_cpu_masks, read_inputs
from scaletrain.diagnose.preflight.job_checks import check_consistency
from scaletrain.diagnose.preflight.local_checks import (
    check_affinity,
    check_open_files,
    cpus_of_mask,
    select_interfaces,
)
from scaletrain.diagnose.preflight.results import RankFacts, RankReport, compact_list
from scaletrain.runtime.launchers import SINGLE_PROCESS
from tests.conftest import REPO

# LUMI's CPU mask per GCD, in GCD order (shared/seeds/003).
LUMI_MASKS = parse_cpu_masks(
    "0xfe000000000000,0xfe00000000000000,0xfe0000,0xfe000000,0xfe,0xfe00,0xfe00000000,"
    "0xfe0000000000"
)


def test_lumi_masks_give_seven_cores_per_gcd() -> None:
    assert compact_list(cpus_of_mask(LUMI_MASKS[0])) == "49-55"
    assert compact_list(cpus_of_mask(LUMI_MASKS[4])) == "1-7"


def test_slurm_default_binding_on_lumi_fails_the_affinity_check() -> None:
    # The seed's first srun: task 0 bound to fe (cores 1-7), but GCD 0 is nearest 49-55.
    result = check_affinity(set(range(1, 8)), 0, 0, LUMI_MASKS)
    assert result.status == "fail"
    assert result.seen == "cores 1-7; GPU 0 is nearest to 49-55"
    assert "--cpu-bind=mask_cpu:0xfe000000000000,0xfe00000000000000," in result.fix
    assert check_affinity(set(range(49, 56)), 0, 0, LUMI_MASKS).status == "ok"
    assert check_affinity(set(range(64)), 0, 0, LUMI_MASKS).status == "warn"  # not bound


def test_nccl_socket_ifname_rules() -> None:
    interfaces = ["lo", "nmn0", "hsn0", "hsn1", "hsn2", "hsn3"]
    assert select_interfaces("hsn", interfaces) == ["hsn0", "hsn1", "hsn2", "hsn3"]
    assert select_interfaces("=hsn0", interfaces) == ["hsn0"]
    assert select_interfaces("^nmn,lo", interfaces) == ["hsn0", "hsn1", "hsn2", "hsn3"]
    assert select_interfaces("hsn", interfaces, exact=True) == []


def test_one_gpu_per_task_uses_that_gpu_and_its_number_selects_the_mask() -> None:
    layout = dataclasses.replace(
        SINGLE_PROCESS, launcher="slurm", rank=3, local_rank=3, world_size=8, local_world_size=8
    )
    result, view = check_devices(layout, {"ROCR_VISIBLE_DEVICES": "3"}, (), 8)
    assert result.status == "ok" and view.used == "3" and view.index == 3


def test_too_many_local_ranks_for_the_visible_gpus_fails() -> None:
    layout = dataclasses.replace(
        SINGLE_PROCESS, launcher="torchrun", rank=3, local_rank=3, world_size=4, local_world_size=4
    )
    result, _ = check_devices(layout, {"CUDA_VISIBLE_DEVICES": "0,1"}, (), None)
    assert result.status == "fail" and "only 2 GPU(s) are visible" in result.seen


def test_ranks_that_disagree_on_the_world_size_fail() -> None:
    def report(rank: int, world_size: int) -> RankReport:
        facts = RankFacts(host="n1", rank=rank, world_size=world_size, master="n1:29500")
        return RankReport(facts=facts)

    result = check_consistency([report(0, 2), report(1, 4)])
    assert result.status == "fail"
    assert result.seen == "ranks disagree on the world size: 2 on ranks 0; 4 on ranks 1"


def test_nodes_with_different_torch_releases_fail() -> None:
    """A node-local copy of another torch (a cache, a stale venv) makes ranks disagree."""

    def report(rank: int, host: str, torch_version: str) -> RankReport:
        facts = RankFacts(
            host=host, rank=rank, world_size=3, master="n1:29500", torch_version=torch_version
        )
        return RankReport(facts=facts)

    result = check_consistency(
        [report(0, "n1", "2.10.0"), report(1, "n2", "2.10.0"), report(2, "n3", "2.7.1")]
    )
    assert result.status == "fail"
    assert (
        result.seen == "ranks disagree on the torch version: 2.10.0 on ranks 0-1; 2.7.1 on ranks 2"
    )
    assert result.fix.startswith("give every node the same software")
    same = check_consistency([report(0, "n1", "2.10.0"), report(1, "n2", "2.10.0")][:2])
    assert same.status == "fail"  # world size 3 with 2 ranks: still caught, as before


def test_missing_rccl_plugin_on_several_nodes_fails_where_the_cluster_has_one() -> None:
    log = (REPO / "tests/fixtures/doctor/net-plugin-missing.log").read_text()
    log += "nixos:4147521:4147521 [3] NCCL INFO Using network Socket\n"
    common = {"backend": "cpu:gloo,cuda:nccl", "library": "RCCL 2.20.5", "nccl_log": log}
    failed = check_communication(**common, plugins=[], multi_node=True, expect_plugin=True)
    assert failed.status == "fail" and "network: Socket" in failed.seen
    assert "aws-ofi-rccl" in failed.fix
    assert (
        check_communication(**common, plugins=[], multi_node=False, expect_plugin=True).status
        == "ok"
    )
    loaded = ["librccl-net.so"]
    assert (
        check_communication(**common, plugins=loaded, multi_node=True, expect_plugin=True).status
        == "ok"
    )


def test_plugins_are_found_in_the_loaded_libraries() -> None:
    maps = (
        "7f00-7f01 r-xp 0 00:00 1 /opt/aws-ofi-rccl/lib/librccl-net.so\n"
        "7f02-7f03 r-xp 0 00:00 2 /usr/lib/libc.so.6\n"
    )
    assert loaded_net_plugins(maps) == ["librccl-net.so"]


def test_inputs_from_variables() -> None:
    inputs = read_inputs(
        {"SCALETRAIN_EXPECTED_CPU_MASKS": "fe,fe00", "SCALETRAIN_MIN_FREE_GB": "50"}
    )
    assert inputs.expected_cpu_masks == (0xFE, 0xFE00)
    assert inputs.min_free_bytes == 50 * 10**9 and inputs.rendezvous_timeout_s == 600


def test_open_files_limit_against_the_sockets_of_512_ranks() -> None:
    # The usual `ulimit -n 1024` is reached near 512 ranks: three full-mesh gloo groups
    # (CPU training, checkpoint vote and background writer) and rank 0's store connections.
    failed = check_open_files(1024, 1024, 512, rank=0)
    assert failed.status == "fail" and "need up to 2301 per process" in failed.seen
    assert "ask the site" in failed.fix
    soft_only = check_open_files(1024, 65536, 512, rank=1)
    assert soft_only.status == "fail" and "ulimit -n $(ulimit -Hn)" in soft_only.fix
    assert check_open_files(1024, 1024, 16, rank=0).status == "ok"
    assert check_open_files(-1, -1, 100_000, rank=0).status == "ok"  # unlimited


def test_gpu_identity_without_uuid_is_never_the_same_for_two_tasks() -> None:
    # One GPU per task, no UUID and no PCI address from the driver: every task sees "#0".
    gpu = SimpleNamespace(name="AMD Instinct MI250X", uuid="")
    first = gpu_identity(gpu, 0, (), task="nid001 pid 11")
    second = gpu_identity(gpu, 0, (), task="nid001 pid 12")
    assert first != second
    # The visibility variable's physical number names the same GPU in every task.
    assert gpu_identity(gpu, 0, ("3",), task="a") == gpu_identity(gpu, 0, ("3",), task="b")
    assert gpu_identity(gpu, 0, ("3",), task="a") != gpu_identity(gpu, 0, ("4",), task="a")
    with_uuid = SimpleNamespace(name="A100", uuid="8a1e0c3e-7f0e")
    assert gpu_identity(with_uuid, 0, ("3",), task="a") == "GPU-8a1e0c3e-7f0e"
    pci = SimpleNamespace(name="A100", uuid="", pci_domain_id=0, pci_bus_id=0xC1, pci_device_id=0)
    assert gpu_identity(pci, 0, (), task="a") == "A100 at PCI 0000:c1:00"
