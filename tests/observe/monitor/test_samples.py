"""The monitor's files: one JSON line per sample and node, read back whole, or only the
newest for the live view, with lines cut short by a killed sampler skipped."""

from __future__ import annotations

from pathlib import Path

from scaletrain.observe.monitor.samples import (
    GpuSample,
    RankSample,
    Sample,
    last_sample,
    monitor_file,
    monitor_files,
    read_run_samples,
    read_samples,
)

GB = 10**9


def sample(time: float, host: str = "nid005001") -> Sample:
    return Sample(
        time=time, host=host, cpu_percent=12.5, memory_used_bytes=40 * GB,
        memory_total_bytes=512 * GB,
        gpus=(GpuSample(index=0, name="AMD Instinct MI250X", utilization_percent=97.0,
                        memory_used_bytes=50 * GB, memory_total_bytes=64 * GB,
                        power_watts=None, pids=(4242,)),),
        ranks=(RankSample(rank=0, pid=4242, cpu_percent=180.0, rss_bytes=6 * GB, gpu_index=0),),
    )  # fmt: skip


def write(path: Path, samples: list[Sample], tail: str = "") -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(s.to_json() + "\n" for s in samples) + tail, encoding="utf-8")


def test_a_sample_reads_back_as_it_was_written(tmp_path: Path) -> None:
    path = monitor_file(tmp_path, "nid005001")
    assert path == tmp_path / "monitor-nid005001.jsonl"
    write(path, [sample(1.0), sample(3.0)])
    assert list(read_samples(path)) == [sample(1.0), sample(3.0)]
    assert sample(1.0).gpus[0].memory_fraction == 50 / 64


def test_a_gpu_without_memory_figures_has_no_memory_fraction() -> None:
    unknown = GpuSample(index=1, name="GPU", utilization_percent=None, memory_used_bytes=None,
                        memory_total_bytes=None, power_watts=None)  # fmt: skip
    assert unknown.memory_fraction is None
    no_total = GpuSample(index=1, name="GPU", utilization_percent=None, memory_used_bytes=5,
                         memory_total_bytes=0, power_watts=None)  # fmt: skip
    assert no_total.memory_fraction is None


def test_a_line_cut_short_by_a_killed_sampler_is_skipped(tmp_path: Path) -> None:
    path = monitor_file(tmp_path, "n1")
    write(path, [sample(1.0, "n1"), sample(3.0, "n1")], tail='{"time": 5.0, "host": "n')
    assert [s.time for s in read_samples(path)] == [1.0, 3.0]
    assert last_sample(path) == sample(3.0, "n1")


def test_the_live_view_reads_the_newest_sample_from_the_end(tmp_path: Path) -> None:
    path = monitor_file(tmp_path, "n1")
    write(path, [sample(float(t), "n1") for t in range(400)])  # ~200 KB, read: the last 64 KB
    assert path.stat().st_size > 65536
    newest = last_sample(path)
    assert newest is not None and newest.time == 399.0
    path.write_text("")
    assert last_sample(path) is None


def test_every_node_of_a_run_by_host(tmp_path: Path) -> None:
    write(monitor_file(tmp_path, "n2"), [sample(2.0, "n2")])
    write(monitor_file(tmp_path, "n1"), [sample(1.0, "n1"), sample(3.0, "n1")])
    write(monitor_file(tmp_path, "n3"), [], tail="{")  # started, killed before a sample
    (tmp_path / "steps-rank-0.json").write_text("{}")
    assert [path.name for path in monitor_files(tmp_path)] == [
        "monitor-n1.jsonl",
        "monitor-n2.jsonl",
        "monitor-n3.jsonl",
    ]
    samples = read_run_samples(tmp_path)
    assert {host: [s.time for s in found] for host, found in samples.items()} == {
        "n1": [1.0, 3.0],
        "n2": [2.0],
    }
