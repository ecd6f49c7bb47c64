"""Cluster profiles: the packaged facts, user profiles, and errors that name the bad field."""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from scaletrain.clusters.catalog import (
    ProfileError,
    load_profile,
    profile_files,
    user_profile_folder,
)
from scaletrain.launch.job_script import resource_options
from tests.clusters.site_files import MINIMAL, user_site
from tests.conftest import REPO

LUMI_TOML = (REPO / "src/scaletrain/clusters/profiles/lumi.toml").read_text()


def broken(tmp_path: Path, old: str, new: str) -> str:
    """The ProfileError message for MINIMAL with `old` replaced by `new`."""
    assert old in MINIMAL
    environ = user_site(tmp_path, "site", MINIMAL.replace(old, new))
    with pytest.raises(ProfileError) as caught:
        load_profile("site", environ)
    return str(caught.value)


def test_packaged_profiles_hold_the_seed_facts() -> None:
    assert set(profile_files({})) >= {"lumi", "puhti", "mahti", "local"}
    lumi = load_profile("lumi", {})
    assert (lumi.node.gpus, lumi.fair_share_cores, lumi.fair_share_memory_gb) == (8, 7, 60)
    assert (lumi.node.usable_cores, lumi.node.usable_memory_gb) == (56, 480)
    # 003: the mask for GCD 0..7, as rank 0..7 reported them under --cpu-bind=mask_cpu.
    assert lumi.node.cpu_masks == (
        "0xfe000000000000", "0xfe00000000000000", "0xfe0000", "0xfe000000",
        "0xfe", "0xfe00", "0xfe00000000", "0xfe0000000000",
    )  # fmt: skip
    # Today's LUMI (../shared/notes/lumi-today.md): no GDR level, userfaultfd, the LAIF image.
    assert lumi.exported["NCCL_SOCKET_IFNAME"] == "hsn0,hsn1,hsn2,hsn3"
    assert lumi.exported["FI_MR_CACHE_MONITOR"] == "userfaultfd"
    assert "NCCL_NET_GDR_LEVEL" not in lumi.exported
    assert lumi.software.default == "laif"
    assert lumi.software.stacks["laif"].container_command == "singularity run"
    assert "module use /appl/local/csc/modulefiles" in lumi.software.stacks["csc"].setup
    # Every LUMI setting of today says when and where it comes from.
    for key in ("environment.FI_MR_CACHE_MONITOR", "software.stacks.laif", "software.task_setup"):
        assert lumi.source_of(key) is not None, key
    assert lumi.partitions["standard-g"].whole_nodes
    puhti, mahti = load_profile("puhti", {}), load_profile("mahti", {})
    assert puhti.slurm.gpu_request == "--gres=gpu:v100:{gpus}" and puhti.fair_share_cores == 10
    assert mahti.slurm.gpu_request == "--gres=gpu:a100:{gpus}" and not mahti.slurm.request_memory
    assert mahti.partitions["gpusmall"].max_gpus == 2 and mahti.partitions["gpumedium"].whole_nodes
    local = load_profile("local", {})
    assert list(local.partitions) == ["debug"] and local.node.accelerator == "cpu"
    assert local.software.stacks["pytorch"].setup == ("module purge", "module load pytorch")


def test_a_user_profile_extends_a_packaged_one(tmp_path: Path) -> None:
    environ = user_site(
        tmp_path,
        "lumi",
        'extends = "lumi"\n[environment]\nNCCL_NET_GDR_LEVEL = "PHB"\n'
        '[software]\ndefault = "csc"\n',
    )
    lumi = load_profile("lumi", environ)
    assert lumi.exported["NCCL_NET_GDR_LEVEL"] == "PHB"
    assert lumi.exported["FI_MR_CACHE_MONITOR"] == "userfaultfd"  # kept from the package
    assert lumi.software.default == "csc" and "laif" in lumi.software.stacks
    broken = user_site(tmp_path / "b", "x", 'extends = "lumy"\n')
    with pytest.raises(ProfileError, match="extends = 'lumy' names no packaged profile"):
        load_profile("x", broken)


def test_sources_must_name_settings_of_the_profile(tmp_path: Path) -> None:
    text = MINIMAL + '\n[sources]\n"environment.NOPE" = { date = "2026-01", source = "x" }\n'
    with pytest.raises(ProfileError, match=r"sources: 'environment\.NOPE' names no setting"):
        load_profile("site", user_site(tmp_path, "site", text))


def test_user_profile_adds_a_site_and_overrides_a_packaged_one(tmp_path: Path) -> None:
    environ = user_site(tmp_path, "mysite", MINIMAL)
    user_site(
        tmp_path, "lumi", LUMI_TOML.replace('max_time = "3-00:00:00"', 'max_time = "1-00:00:00"')
    )
    assert user_profile_folder(environ) == tmp_path / "config" / "scaletrain" / "clusters"
    assert load_profile("mysite", environ).node.gpu_model == "H100"
    files = profile_files(environ)
    assert files["lumi"].origin == "user" and files["puhti"].origin == "packaged"
    lumi = load_profile("lumi", environ)
    assert lumi.partitions["small-g"].max_time == "1-00:00:00"
    assert lumi.source.endswith("config/scaletrain/clusters/lumi.toml")


def test_default_user_folder_is_under_home() -> None:
    assert user_profile_folder({"HOME": "/home/ada"}) == Path(
        "/home/ada/.config/scaletrain/clusters"
    )


def test_unknown_cluster_lists_known_names_and_guesses() -> None:
    with pytest.raises(ProfileError) as caught:
        load_profile("lumii", {"HOME": "/nonexistent"})
    assert "There is no cluster profile called 'lumii'; known: local, lumi, mahti, puhti." in str(
        caught.value
    )
    assert "did you mean 'lumi'?" in caught.value.hint
    assert "/nonexistent/.config/scaletrain/clusters/lumii.toml" in caught.value.hint


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ("gpus = 4\n", "gpus = 0\n", "node.gpus: Input should be greater than 0"),
        ("gpus = 4\n", "gpus = 'four'\n", "node.gpus: Input should be a valid integer"),
        ('accelerator = "nvidia"', 'accelerator = "tpu"', "node.accelerator: Input should be"),
        ("usable_cores = 64\n", "", "node.usable_cores: missing (required)"),
        ("gpu_model", "gpu_modle", "node.gpu_modle: unknown field"),
        (
            '"--gres=gpu:h100:{gpus}"',
            '"--gres=gpu:h100:4"',
            "slurm.gpu_request: '--gres=gpu:h100:4'",
        ),
        ('max_time = "2-00:00:00"', 'max_time = "two days"', "partitions.gpu.max_time: 'two days'"),
        (
            "units_per_gpu_hour = 1",
            "units_per_gpu_hour = -1",
            "partitions.gpu.billing.units_per_gpu_hour",
        ),
        ('rule = "sum"', 'rule = "free"', "partitions.gpu.billing: Input tag 'free'"),
        ("cores = 16", "cores = 17", "default_per_gpu.cores = 17 × 4 GPUs is more than"),
        ("memory_gb = 120", "memory_gb = 130", "default_per_gpu.memory_gb = 130 × 4 GPUs"),
        ('description = "my site"', 'name = "x"', "field 'name' is not allowed"),
        ("[node]", "[node", "is not valid TOML"),
    ],
)
def test_broken_profile_names_the_file_and_the_field(
    tmp_path: Path, old: str, new: str, expected: str
) -> None:
    message = broken(tmp_path, old, new)
    assert "site.toml" in message
    assert expected in message
    assert "HINT:" in message


def test_cpu_masks_must_be_one_hex_mask_per_gpu(tmp_path: Path) -> None:
    message = broken(
        tmp_path, "usable_cores = 64\n", 'usable_cores = 64\ncpu_masks = ["0xff", "ff"]\n'
    )
    assert "node.cpu_masks: 'ff' is not a hexadecimal mask" in message
    message = broken(tmp_path, "usable_cores = 64\n", 'usable_cores = 64\ncpu_masks = ["0xff"]\n')
    assert "node: cpu_masks has 1 masks for 4 GPUs" in message


def test_profiles_ship_in_the_wheel(tmp_path: Path) -> None:
    # `pip install .` (not only editable) must carry the TOML data the code reads.
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "--no-build-isolation",
         "-w", str(tmp_path), "-q"],
        check=True, capture_output=True, timeout=120,
    )  # fmt: skip
    (wheel,) = tmp_path.glob("scaletrain-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    for cluster in ("lumi", "puhti", "mahti", "local"):
        assert f"scaletrain/clusters/profiles/{cluster}.toml" in names
    # Every data file the code reads (TOML tables, templates) is in the wheel too.
    source = REPO / "src"
    data = [
        path.relative_to(source).as_posix()
        for path in (source / "scaletrain").rglob("*")
        if path.suffix in (".toml", ".j2", ".typed")
    ]
    assert "scaletrain/planning/modes.toml" in data
    assert sorted(name for name in data if name not in names) == []


def test_the_documented_example_profile_is_valid(tmp_path: Path) -> None:
    from scaletrain.planning.planner import plan_job
    from scaletrain.planning.request import Request

    document = (REPO / "docs/clusters-and-planning.md").read_text()
    example = document.split("```toml\n", 1)[1].split("```", 1)[0]
    environ = user_site(tmp_path, "mysite", example)
    profile = load_profile("mysite", environ)
    plan = plan_job(Request(cluster="mysite", script="t.py", time="4:00:00", gpus=8), profile)
    assert resource_options(plan)[:5] == (
        "--partition=gpu", "--nodes=2", "--ntasks-per-node=1", "--cpus-per-task=64",
        "--gres=gpu:h100:4",
    )  # fmt: skip


def test_each_site_names_one_partition_for_rehearsals(tmp_path: Path) -> None:
    rehearsals = {name: load_profile(name, {}).rehearsal_partition for name in profile_files({})}
    assert rehearsals == {"lumi": "dev-g", "puhti": "gputest", "mahti": "gputest", "local": "debug"}
    assert load_profile("site", user_site(tmp_path, "site", MINIMAL)).rehearsal_partition is None
    billing = 'billing = { rule = "sum", units_per_gpu_hour = 1 }\n'
    two = MINIMAL.replace("[partitions.gpu]\n", "[partitions.gpu]\nrehearsal = true\n")
    message = broken(tmp_path, MINIMAL, two + f"[partitions.test]\nrehearsal = true\n{billing}")
    assert "partitions gpu, test all say rehearsal = true: at most one may" in message
