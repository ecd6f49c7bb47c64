"""Reading what scontrol and sacct print: real lines and generated ones."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from scaletrain.slurm.output import (
    SACCT_FIELDS,
    SACCT_RUN_FIELDS,
    AccountedRun,
    job_from_sacct_line,
    job_from_scontrol,
    node_from_fields,
    parse_key_values,
    run_from_sacct_line,
)

# `scontrol show node -o` on the test cluster, plus what a drained GPU node adds (Gres, Reason).
NODE_LINE = (
    "NodeName=n1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=4 CPUTot=4 CPULoad=2.38 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:mi250:8 NodeAddr=10.77.0.1 "
    "NodeHostName=n1 Version=22.05.8 OS=Linux 6.18.44-fc-v669 #1 SMP PREEMPT_DYNAMIC @0  "
    "RealMemory=491520 AllocMem=0 FreeMem=18008 Sockets=4 Boards=1 State=IDLE+DRAIN "
    "ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=small-g,standard-g "
    "CfgTRES=cpu=4,mem=1M,billing=4 AllocTRES= Reason=Kill task failed [root@2026-11-23T07:47:13]"
)

keys = st.from_regex(r"[A-Z][A-Za-z0-9_/:]{0,12}", fullmatch=True)
# Values as Slurm prints them: no leading/trailing blanks, and no " Key=" inside.
values = st.from_regex(r"([a-z0-9=,:\[\]().*@-]+( [a-z0-9#@]+)*)?", fullmatch=True)


@given(st.dictionaries(keys, values, min_size=1, max_size=8))
def test_key_value_lines_round_trip(fields: dict[str, str]) -> None:
    line = " ".join(f"{key}={value}" for key, value in fields.items())
    expected = {key: "" if value == "(null)" else value for key, value in fields.items()}
    assert parse_key_values(line) == expected


def test_values_with_spaces_and_keys_with_slashes() -> None:
    fields = parse_key_values(NODE_LINE)
    assert fields["OS"] == "Linux 6.18.44-fc-v669 #1 SMP PREEMPT_DYNAMIC @0"
    assert fields["Reason"] == "Kill task failed [root@2026-11-23T07:47:13]"
    assert fields["CfgTRES"] == "cpu=4,mem=1M,billing=4" and fields["AllocTRES"] == ""
    assert parse_key_values("CPUs/Task=1 AllocNode:Sid=login1:123")["AllocNode:Sid"] == "login1:123"


def test_a_gpu_node() -> None:
    node = node_from_fields(parse_key_values(NODE_LINE))
    assert (node.name, node.address, node.cpus, node.real_memory_mb) == (
        "n1",
        "10.77.0.1",
        4,
        491520,
    )
    assert (node.gres, node.state) == ("gpu:mi250:8", "IDLE+DRAIN")
    assert node.features == () and node.partitions == ("small-g", "standard-g")


def test_sacct_lines() -> None:
    assert len(SACCT_FIELDS) == 9
    job = job_from_sacct_line(
        "4242|train|CANCELLED by 1000|None|00:01:02|01:00:00|2|nid[001-002]|0:15"
    )
    assert job is not None
    assert (job.job_id, job.name, job.state, job.reason) == ("4242", "train", "CANCELLED", "")
    assert (job.elapsed, job.time_limit, job.num_nodes) == ("00:01:02", "01:00:00", 2)
    assert (job.nodelist, job.exit_code, job.restarts, job.is_active) == (
        "nid[001-002]",
        "0:15",
        None,
        False,
    )
    pending = job_from_sacct_line(
        "4243|train|PENDING|Priority|00:00:00|01:00:00|1|None assigned|0:0"
    )
    assert pending is not None and pending.is_active and pending.nodelist == ""
    assert pending.state_with_reason == "PENDING (Priority)"
    assert job_from_sacct_line("not|enough") is None


def test_sacct_runs_of_a_requeued_job() -> None:
    # `sacct -j 1 --duplicates --allocations` with SLURM_TIME_FORMAT=%s on the test cluster.
    first = run_from_sacct_line("1|REQUEUED|1795860326|1795860327|1|1|")
    last = run_from_sacct_line("1|COMPLETED|1795860340|1795860343|3|2|0")
    assert first == AccountedRun(
        job_id="1", state="REQUEUED", start=1795860326.0, end=1795860327.0, elapsed_s=1,
        nodes=1, energy_joules=None,
    )  # fmt: skip
    # No energy plugin: Slurm says 0, which no job that ran can have used.
    assert last is not None and (last.nodes, last.energy_joules) == (2, None)
    running = run_from_sacct_line("7|RUNNING|1795860340|Unknown|60|1|5400")
    assert running is not None and (running.end, running.energy_joules) == (None, 5400)
    pending = run_from_sacct_line("8|PENDING|Unknown|Unknown|0|1|0")
    assert pending is not None and pending.start is None
    assert run_from_sacct_line("1|COMPLETED|x") is None
    assert len(SACCT_RUN_FIELDS) == 7


def test_a_job_pending_on_its_own_exclusion_is_named_so() -> None:
    # A requeued job that excludes one of the two nodes of its partition (scontrol's words).
    line = (
        "JobId=41 JobName=hang JobState=PENDING Reason=BadConstraints Dependency=(null) "
        "Restarts=1 RunTime=00:00:00 TimeLimit=00:10:00 NodeList= NumNodes=2-2 ExcNodeList=n2"
    )
    job = job_from_scontrol(parse_key_values(line))
    assert job.excluded_nodes == "n2" and job.waits_on_its_exclusion
    in_line = job_from_scontrol(parse_key_values(line.replace("BadConstraints", "Priority")))
    assert not in_line.waits_on_its_exclusion
    nothing_excluded = job_from_scontrol(parse_key_values(line.replace("ExcNodeList=n2", "")))
    assert not nothing_excluded.waits_on_its_exclusion
