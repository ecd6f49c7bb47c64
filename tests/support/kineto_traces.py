"""Write GPU profiler traces in Kineto's format, as PyTorch writes them on CUDA and ROCm.

No GPU here: the analysis of GPU traces is tested (and compared with Holistic Trace
Analysis in benchmarks/analyze_vs_hta.py) on files written in the same layout as
torch.profiler's export_chrome_trace: a header with deviceProperties and distributedInfo,
then "traceEvents" with ProfilerStep#N annotations, cpu_op operators, runtime launches
(cudaLaunchKernel / hipLaunchKernel, cat "cuda_runtime", args.correlation) and device
events (cat "kernel" / "gpu_memcpy" on a stream, the same correlation). Kernel names are
those NVIDIA's and AMD's libraries use (NCCL/RCCL, cuBLAS/rocBLAS-Tensile, PyTorch's own).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Vendor:
    device_name: str
    launch: str
    gemm: str
    elementwise: str
    allreduce: str
    copy: str


CUDA = Vendor(
    device_name="NVIDIA A100-SXM4-40GB",
    launch="cudaLaunchKernel",
    gemm="ampere_sgemm_128x64_tn",
    elementwise=(
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float> >"
        "(int, at::native::CUDAFunctor_add<float>, at::detail::Array<char*, 3>)"
    ),
    allreduce="ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)",
    copy="Memcpy HtoD (Pageable -> Device)",
)
ROCM = Vendor(
    device_name="AMD Instinct MI250X",
    launch="hipLaunchKernel",
    gemm="Cijk_Ailk_Bljk_SB_MT64x64x16_MI32x32x2x1_SN_1LDSB0_GRVW4",
    elementwise=(
        "void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
        "std::array<char*, 3ul> >(int, at::native::CUDAFunctor_add<float>, std::array<char*, 3ul>)"
    ),
    allreduce="ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)",
    copy="Memcpy HtoD (Host -> Device)",
)

MAIN_THREAD, COMPUTE_STREAM, COMM_STREAM = 100, 7, 20


class TraceWriter:
    """Events of one rank, written out in Kineto's layout."""

    def __init__(self, vendor: Vendor, rank: int, world_size: int) -> None:
        self.vendor, self.rank, self.world_size = vendor, rank, world_size
        self.events: list[dict[str, Any]] = []
        self._correlation = 1000

    def host(self, name: str, start: float, duration: float, cat: str = "cpu_op",
             thread: int = MAIN_THREAD) -> None:  # fmt: skip
        """A host event: an operator (cpu_op) or a range (user_annotation) on a thread."""
        self.events.append(
            {"ph": "X", "cat": cat, "name": name, "pid": 1, "tid": thread,
             "ts": start, "dur": duration, "args": {"External id": len(self.events)}}
        )  # fmt: skip

    def kernel(self, name: str, launch_at: float, start: float, duration: float, stream: int,
               cat: str = "kernel") -> None:  # fmt: skip
        """A device event and the runtime call that launched it (same correlation id)."""
        self._correlation += 1
        correlation = self._correlation
        self.events.append(
            {"ph": "X", "cat": "cuda_runtime", "name": self.vendor.launch, "pid": 1,
             "tid": MAIN_THREAD, "ts": launch_at, "dur": 3.0,
             "args": {"correlation": correlation, "cbid": 211}}
        )  # fmt: skip
        self.events.append(
            {"ph": "X", "cat": cat, "name": name, "pid": 0, "tid": stream, "ts": start,
             "dur": duration, "args": {"device": 0, "stream": stream,
                                       "correlation": correlation, "context": 1}}
        )  # fmt: skip

    def write(self, path: Path) -> Path:
        header = {
            "schemaVersion": 1,
            "deviceProperties": [{"id": 0, "name": self.vendor.device_name}],
            "distributedInfo": {"backend": "nccl", "rank": self.rank,
                                "world_size": self.world_size},
        }  # fmt: skip
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("w", encoding="utf-8") as file:
            text = json.dumps(header, indent=2)[:-2]  # Kineto writes the header first
            file.write(text + ',\n  "traceEvents": [\n')
            for index, event in enumerate(self.events):
                file.write(("  ,\n" if index else "") + json.dumps(event, indent=4))
            file.write(f'\n  ],\n  "traceName": "{path.name}"\n}}\n')
        return path


def training_trace(
    vendor: Vendor, rank: int, world_size: int, *, steps: int, kernels_per_step: int,
    late_us: float = 0.0, seed: int = 0, whole_us: bool = False,
) -> TraceWriter:  # fmt: skip
    """A DDP-like step: data loading, forward and backward kernels on the compute stream,
    all_reduce kernels on the communication stream overlapping the backward pass, then an
    optimizer step; `late_us` delays this rank's whole step (a straggler). Times have
    Kineto's nanosecond resolution, or whole microseconds with `whole_us`."""
    generator = random.Random(seed * 1000 + rank)
    digits = 0 if whole_us else 3

    def uniform(low: float, high: float) -> float:
        return round(generator.uniform(low, high), digits)

    writer = TraceWriter(vendor, rank, world_size)
    now = 1_000_000.0
    for step in range(steps):
        step_start = now
        now += late_us
        writer.host("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", now, 300.0,
                    "user_annotation")  # fmt: skip
        writer.kernel(vendor.copy, now + 300, now + 310, 40.0, COMPUTE_STREAM, "gpu_memcpy")
        now += 360.0
        device_time = now
        for index in range(kernels_per_step):
            name = vendor.gemm if index % 3 else vendor.elementwise
            duration = uniform(20.0, 80.0)
            gap = uniform(0.0, 15.0)
            launch = now + index * 5.0
            writer.host("aten::mm" if index % 3 else "aten::add", launch - 2.0, 6.0)
            device_time = max(device_time + gap, launch + 4.0)
            writer.kernel(name, launch, device_time, duration, COMPUTE_STREAM)
            device_time += duration
            if index > kernels_per_step // 2 and index % 4 == 0:  # gradient buckets
                writer.host("nccl:all_reduce", launch + 1.0, 4.0, "user_annotation")
                middle = device_time - round(duration / 2, digits)
                writer.kernel(vendor.allreduce, launch + 1.0, middle, uniform(60.0, 140.0),
                              COMM_STREAM)  # fmt: skip
        now = max(now + kernels_per_step * 5.0, device_time) + 50.0
        writer.host("Optimizer.step#SGD.step", now, 100.0, "user_annotation")
        now += 150.0
        writer.host(f"ProfilerStep#{step}", step_start, now - step_start, "user_annotation")
    return writer


GLOO_THREAD = 200
DATA = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"


def gloo_trace(rank: int, world_size: int, *, late_us: float = 0.0) -> TraceWriter:
    """A CPU-only DDP rank as torch.profiler records it with gloo: three 1000 µs steps on
    the training thread, gloo's all_reduce ranges on a thread of their own, started `late_us`
    later on a straggler. Analysed (steps 1-2, 0-2000 µs; the third is left out as HTA does):

    step 1: data [0, 100]; aten::linear [100, 600] calling aten::mm [150, 550];
            c10d::allreduce_ [600, 650]; aten::add [650, 900]; gloo:all_reduce [620, 1000]
    step 2: data [1000, 1100]; aten::mm [1100, 1800]; gloo:all_reduce [1850, 1900]
    step 3: aten::mm [2100, 2900]; gloo:all_reduce [2950, 3000]

    compute 1450 (operators, without data loading and the c10d call), communication 450
    ([600, 1000] and [1850, 1900]), of it 250 overlapped ([650, 900]), data 200, idle 150
    ([1800, 1850] and [1900, 2000]).
    """
    writer = TraceWriter(CUDA, rank, world_size)
    for step in (1, 2, 3):
        writer.host(f"ProfilerStep#{step}", 1000.0 * (step - 1), 1000.0, "user_annotation")
    for start in (0.0, 1000.0):
        writer.host(DATA, start, 100.0, "user_annotation")
    writer.host("aten::linear", 100, 500)
    writer.host("aten::mm", 150, 400)
    writer.host("c10d::allreduce_", 600, 50)
    writer.host("aten::add", 650, 250)
    writer.host("aten::mm", 1100, 700)
    writer.host("aten::mm", 2100, 800)
    for start, duration in ((620.0, 380.0), (1850.0, 50.0), (2950.0, 50.0)):
        writer.host("gloo:all_reduce", start + late_us, duration, "user_annotation", GLOO_THREAD)
    return writer
