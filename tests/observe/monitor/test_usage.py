"""What `scaletrain monitor` flags, on samples as a GPU node's sampler writes them (no GPU
here: the GPU readings are the numbers NVML / AMD SMI would give)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from scaletrain.observe.monitor.samples import (
    GpuSample,
    RankSample,
    Sample,
    monitor_file,
    read_run_samples,
)
from scaletrain.observe.monitor.usage import find_problems, summarize, window

GB = 10**9


def node_sample(time: float, host: str, busy: list[float], memory_gb: list[float]) -> Sample:
    """One node with a GPU per rank; rank r on GPU r (ranks numbered per host from 0)."""
    first = 0 if host == "n1" else len(busy)
    return Sample(
        time=time, host=host, cpu_percent=50.0, memory_used_bytes=100 * GB,
        memory_total_bytes=512 * GB,
        gpus=tuple(
            GpuSample(index=i, name="AMD Instinct MI250X", utilization_percent=b,
                      memory_used_bytes=int(m * GB), memory_total_bytes=64 * GB,
                      power_watts=300.0, pids=(1000 + first + i,))
            for i, (b, m) in enumerate(zip(busy, memory_gb, strict=True))
        ),
        ranks=tuple(
            RankSample(rank=first + i, pid=1000 + first + i, cpu_percent=100.0,
                       rss_bytes=8 * GB, gpu_index=i)
            for i in range(len(busy))
        ),
    )  # fmt: skip


def test_a_healthy_job_has_no_flags() -> None:
    samples = {h: [node_sample(t, h, [95, 93], [40, 41]) for t in (0, 2, 4)] for h in ("n1", "n2")}
    usage = summarize(samples)
    assert [r.rank for r in usage.ranks] == [0, 1, 2, 3]
    assert find_problems(usage) == []


def test_idle_gpu_imbalance_and_memory_are_flagged(tmp_path: Path) -> None:
    # n2's GPU 1 does nothing; n1's GPU 0 is nearly full. Written and read back as the
    # sampler's files, one per node.
    for host, busy, memory in (("n1", [95, 90], [62, 40]), ("n2", [92, 3], [40, 1])):
        with monitor_file(tmp_path, host).open("w") as file:
            for time in (0.0, 2.0, 4.0):
                file.write(node_sample(time, host, busy, memory).to_json() + "\n")
        with monitor_file(tmp_path, host).open("a") as file:
            file.write('{"time": 6.0, "host": "n')  # a sampler killed mid-line
    samples = read_run_samples(tmp_path)
    assert {host: len(found) for host, found in samples.items()} == {"n1": 3, "n2": 3}
    messages = {f.kind: f.message for f in find_problems(summarize(samples))}
    assert messages["idle-gpu"].startswith("n2 GPU 1 is idle (3% busy) while training runs")
    assert messages["imbalance"].startswith("ranks do unequal work: rank 3 3% vs 95% GPU")
    assert messages["memory"] == "n1 GPU 0 memory reached 97% of 64 GB: near out-of-memory"


def cpu_node(time: float, cpu_by_rank: dict[int, float], memory_gb: float = 100) -> Sample:
    """A CPU-only node (no GPU library): ranks with their CPU use, 100 = one core."""
    return Sample(
        time=time, host="cpu1", cpu_percent=60.0, memory_used_bytes=int(memory_gb * GB),
        memory_total_bytes=256 * GB,
        ranks=tuple(RankSample(rank=rank, pid=100 + rank, cpu_percent=cpu, rss_bytes=GB)
                    for rank, cpu in cpu_by_rank.items()),
    )  # fmt: skip


def test_means_and_peaks_per_node_gpu_and_rank() -> None:
    samples = {"n1": [node_sample(0, "n1", [90, 50], [10, 20]),
                      node_sample(2, "n1", [70, 30], [30, 25])]}  # fmt: skip
    usage = summarize(samples)
    (node,) = usage.nodes
    assert (node.samples, node.first, node.last) == (2, 0, 2)
    assert (node.peak_memory_bytes, node.memory_total_bytes) == (100 * GB, 512 * GB)
    assert [(g.index, g.mean_utilization, g.peak_memory_bytes, g.ranks) for g in usage.gpus] == [
        (0, 80.0, 30 * GB, (0,)),
        (1, 40.0, 25 * GB, (1,)),
    ]
    assert [(r.rank, r.gpu_index, r.mean_cpu_percent) for r in usage.ranks] == [
        (0, 0, 100.0),
        (1, 1, 100.0),
    ]


def test_without_gpus_unequal_cpu_use_is_the_imbalance() -> None:
    samples = {"cpu1": [cpu_node(t, {0: 100.0, 1: 98.0, 2: 40.0}) for t in (0, 2)]}
    findings = find_problems(summarize(samples))
    assert [f.kind for f in findings] == ["imbalance"]
    assert findings[0].message.startswith("ranks do unequal work: rank 2 40% vs 100% CPU")
    # Within a quarter of the busiest rank is equal enough.
    balanced = {"cpu1": [cpu_node(t, {0: 100.0, 1: 80.0}) for t in (0, 2)]}
    assert find_problems(summarize(balanced)) == []


def test_host_memory_near_the_limit() -> None:
    samples = {"cpu1": [cpu_node(0, {0: 100.0}, memory_gb=120), cpu_node(2, {0: 100.0}, 240)]}
    (finding,) = find_problems(summarize(samples))
    assert finding.kind == "memory"
    assert finding.message == (
        "cpu1 host memory reached 94% of 256 GB: the job may be killed for it"
    )


def test_a_gpu_is_idle_only_while_training_runs() -> None:
    sampled = node_sample(0, "n1", [3, 3], [1, 1])
    before_training = {"n1": [dataclasses.replace(sampled, ranks=())]}
    assert find_problems(summarize(before_training)) == []
    assert [f.kind for f in find_problems(summarize({"n1": [sampled]}))] == ["idle-gpu"] * 2


def test_the_live_view_judges_the_last_seconds() -> None:
    samples = [cpu_node(float(t), {0: 100.0}) for t in range(0, 100, 2)]
    assert [s.time for s in window(samples, 5)] == [94.0, 96.0, 98.0]
    assert window([], 30) == []
