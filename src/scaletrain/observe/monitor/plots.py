"""The monitor's PNG plot: GPU and CPU use and memory over a run, per node, GPU and rank.

matplotlib is imported only when a figure is made (core/plotting.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from scaletrain.core.plotting import pyplot, save_figure
from scaletrain.observe.monitor.samples import Sample


def plot_monitor(samples_by_host: Mapping[str, Sequence[Sample]], path: Path) -> Path:
    """Over time: GPU utilisation per GPU (when there are GPUs), CPU per rank, memory per node."""
    plt = pyplot()
    has_gpus = any(sample.gpus for samples in samples_by_host.values() for sample in samples)
    rows = 3 if has_gpus else 2
    figure, axes = plt.subplots(rows, 1, figsize=(9, 2.6 * rows), sharex=True)
    start = min(samples[0].time for samples in samples_by_host.values() if samples)
    for host, samples in sorted(samples_by_host.items()):
        times = [sample.time - start for sample in samples]
        row = 0
        if has_gpus:
            indices = sorted({gpu.index for sample in samples for gpu in sample.gpus})
            for index in indices:
                values = [
                    next((g.utilization_percent for g in s.gpus if g.index == index), None)
                    for s in samples
                ]
                axes[0].plot(times, values, label=f"{host} GPU {index}")
            axes[0].set_ylabel("GPU busy (%)")
            row = 1
        ranks = sorted({rank.rank for sample in samples for rank in sample.ranks})
        for rank_id in ranks:
            points = [
                (sample.time - start, rank.cpu_percent)
                for sample in samples
                for rank in sample.ranks
                if rank.rank == rank_id
            ]
            axes[row].plot(*zip(*points, strict=True), label=f"rank {rank_id} ({host})")
        axes[row].set_ylabel("CPU per rank (%)")
        axes[row + 1].plot(times, [s.memory_used_bytes / 1e9 for s in samples], label=host)
        axes[row + 1].set_ylabel("host memory (GB)")
    axes[-1].set_xlabel("seconds since the first sample")
    for axis in axes:
        axis.grid(True, alpha=0.3)
        axis.legend(fontsize="small", loc="upper right")
    axes[0].set_title("GPU and CPU use during the run")
    return save_figure(figure, path)
