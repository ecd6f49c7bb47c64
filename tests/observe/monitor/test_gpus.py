"""GPU readings in the monitor's units, from what NVML and AMD SMI return (no GPU here: each
library is replaced by a module answering as its documentation says, quirks included:
NVML's milliwatts and byte names, AMD SMI's MiB, "N/A" and older process handles)."""

from __future__ import annotations

import importlib.machinery
import sys
import types
from typing import Any

import pytest

from scaletrain.observe.monitor.gpus import AmdReader, NoGpus, NvidiaReader, open_gpu_reader
from scaletrain.observe.monitor.samples import GpuSample

MIB = 1024 * 1024


def library(name: str, **functions: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__spec__ = importlib.machinery.ModuleSpec(name, None)
    module.__dict__.update(functions)
    return module


def amdsmi() -> types.ModuleType:
    """Two MI250X GCDs: the second reports neither activity nor current power."""
    answers: dict[str, dict[str, Any]] = {
        "gcd0": {"activity": {"gfx_activity": 97, "umc_activity": 40},
                 "vram": {"vram_used": 51200, "vram_total": 65520},
                 "power": {"current_socket_power": 412, "average_socket_power": 400},
                 "processes": [{"name": "python", "pid": 4242}, {"name": "?", "pid": "N/A"}]},
        "gcd1": {"activity": None,
                 "vram": {"vram_used": 0, "vram_total": 65520},
                 "power": {"current_socket_power": "N/A", "average_socket_power": 88},
                 "processes": [object()]},  # older amdsmi: process handles, no pid
    }  # fmt: skip

    def answer(what: str) -> Any:
        def read(handle: str) -> Any:
            value = answers[handle][what]
            if value is None:
                raise RuntimeError("AMDSMI_STATUS_NOT_SUPPORTED")
            return value

        return read

    return library(
        "amdsmi",
        AmdSmiInitFlags=types.SimpleNamespace(INIT_AMD_GPUS=2),
        amdsmi_init=lambda flags: None,
        amdsmi_shut_down=lambda: None,
        amdsmi_get_processor_handles=lambda: ["gcd0", "gcd1"],
        amdsmi_get_gpu_activity=answer("activity"),
        amdsmi_get_gpu_vram_usage=answer("vram"),
        amdsmi_get_power_info=answer("power"),
        amdsmi_get_gpu_asic_info=lambda handle: {"market_name": "AMD Instinct MI250X"},
        amdsmi_get_gpu_process_list=answer("processes"),
    )


def pynvml(*, init_fails: bool = False) -> types.ModuleType:
    """Two A100s; the second cannot report power (nvmlDeviceGetPowerUsage raises)."""

    def init() -> None:
        if init_fails:
            raise RuntimeError("NVML Shared Library Not Found / Driver Not Loaded")

    def power(handle: int) -> int:
        if handle == 1:
            raise RuntimeError("NVML_ERROR_NOT_SUPPORTED")
        return 250_500  # milliwatts

    return library(
        "pynvml",
        nvmlInit=init,
        nvmlShutdown=lambda: None,
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda index: index,
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(used=(h + 1) * 10**9,
                                                                total=40 * 10**9),
        nvmlDeviceGetPowerUsage=power,
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=99 - h * 99, memory=3),
        nvmlDeviceGetComputeRunningProcesses=lambda h: [types.SimpleNamespace(pid=7000 + h)],
        nvmlDeviceGetName=lambda h: b"NVIDIA A100-SXM4-40GB",  # bytes in older bindings
    )  # fmt: skip


def test_amd_smi_in_the_monitors_units(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "amdsmi", amdsmi())
    assert AmdReader().read() == (
        GpuSample(index=0, name="AMD Instinct MI250X", utilization_percent=97.0,
                  memory_used_bytes=51200 * MIB, memory_total_bytes=65520 * MIB,
                  power_watts=412.0, pids=(4242,)),
        GpuSample(index=1, name="AMD Instinct MI250X", utilization_percent=None,
                  memory_used_bytes=0, memory_total_bytes=65520 * MIB, power_watts=88.0,
                  pids=()),
    )  # fmt: skip


def test_nvml_in_the_monitors_units(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", pynvml())
    reader = NvidiaReader()
    assert reader.read() == (
        GpuSample(index=0, name="NVIDIA A100-SXM4-40GB", utilization_percent=99.0,
                  memory_used_bytes=10**9, memory_total_bytes=40 * 10**9, power_watts=250.5,
                  pids=(7000,)),
        GpuSample(index=1, name="NVIDIA A100-SXM4-40GB", utilization_percent=0.0,
                  memory_used_bytes=2 * 10**9, memory_total_bytes=40 * 10**9, power_watts=None,
                  pids=(7001,)),
    )  # fmt: skip
    reader.close()


def test_the_reader_of_the_library_that_works_else_none(monkeypatch: pytest.MonkeyPatch) -> None:
    # Neither library installed: CPU and memory samples only.
    monkeypatch.setitem(sys.modules, "pynvml", None)
    monkeypatch.setitem(sys.modules, "amdsmi", None)
    assert isinstance(open_gpu_reader(), NoGpus) and NoGpus().read() == ()
    # NVML installed without a driver (a login node), AMD SMI working: AMD SMI.
    monkeypatch.setitem(sys.modules, "pynvml", pynvml(init_fails=True))
    monkeypatch.setitem(sys.modules, "amdsmi", amdsmi())
    assert isinstance(open_gpu_reader(), AmdReader)
    # Both working: NVML is asked first.
    monkeypatch.setitem(sys.modules, "pynvml", pynvml())
    assert isinstance(open_gpu_reader(), NvidiaReader)
