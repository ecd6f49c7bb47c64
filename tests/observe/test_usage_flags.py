"""What `scaletrain monitor` flags, on samples as a GPU node's sampler writes them (no GPU
here: the GPU readings are the numbers NVML / AMD SMI would give)."""

from __future__ import annotations

from pathlib import Path

from scaletrain.observe.samples import GpuSample, RankSample, Sample, monitor_file, read_run_samples
from scaletrain.observe.usage import find_problems, summarize

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
