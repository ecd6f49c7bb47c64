"""GPU readings through the vendors' libraries: nvidia-ml-py (NVML) and amdsmi (AMD SMI).

Written from the libraries' documentation; no GPU has run these paths in this project's tests
(docs/observe.md lists them as untested). Each reader opens its library once, reads every
device at each sample and reports nothing (not an error) where the library or a device is
missing: a node without GPUs still has CPU and memory samples.
"""

from __future__ import annotations

import contextlib
import importlib.util
from collections.abc import Callable
from typing import Any, Protocol

from scaletrain.observe.monitor.samples import GpuSample

_MIB = 1024 * 1024


class GpuReader(Protocol):
    def read(self) -> tuple[GpuSample, ...]: ...

    def close(self) -> None: ...


def _value(read: Callable[[Any], Any], handle: Any) -> Any:
    """`read(handle)`, or None where this device or driver does not report it."""
    try:
        value = read(handle)
    except Exception:  # the libraries raise their own error types for "not supported"
        return None
    return None if value in ("N/A", None) else value


class NvidiaReader:
    """NVML: nvmlDeviceGetUtilizationRates (% of time a kernel ran), GetMemoryInfo (bytes),
    GetPowerUsage (milliwatts), GetComputeRunningProcesses (pids holding memory)."""

    def __init__(self) -> None:
        import pynvml

        pynvml.nvmlInit()
        self._nvml = pynvml
        self._handles = [
            pynvml.nvmlDeviceGetHandleByIndex(index) for index in range(pynvml.nvmlDeviceGetCount())
        ]

    def read(self) -> tuple[GpuSample, ...]:
        nvml = self._nvml
        samples = []
        for index, handle in enumerate(self._handles):
            memory = _value(nvml.nvmlDeviceGetMemoryInfo, handle)
            power_mw = _value(nvml.nvmlDeviceGetPowerUsage, handle)
            utilization = _value(nvml.nvmlDeviceGetUtilizationRates, handle)
            processes = _value(nvml.nvmlDeviceGetComputeRunningProcesses, handle)
            name = _value(nvml.nvmlDeviceGetName, handle)
            samples.append(
                GpuSample(
                    index=index,
                    name=name.decode() if isinstance(name, bytes) else str(name or "GPU"),
                    utilization_percent=None if utilization is None else float(utilization.gpu),
                    memory_used_bytes=None if memory is None else int(memory.used),
                    memory_total_bytes=None if memory is None else int(memory.total),
                    power_watts=None if power_mw is None else power_mw / 1000,
                    pids=tuple(int(process.pid) for process in processes or ()),
                )
            )
        return tuple(samples)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._nvml.nvmlShutdown()


class AmdReader:
    """AMD SMI: amdsmi_get_gpu_activity (gfx_activity %), amdsmi_get_gpu_vram_usage (MiB),
    amdsmi_get_power_info (W), amdsmi_get_gpu_process_list. Each MI250X GCD is a device."""

    def __init__(self) -> None:
        import amdsmi

        amdsmi.amdsmi_init(amdsmi.AmdSmiInitFlags.INIT_AMD_GPUS)
        self._smi = amdsmi
        self._handles = list(amdsmi.amdsmi_get_processor_handles())

    def read(self) -> tuple[GpuSample, ...]:
        smi = self._smi
        samples = []
        for index, handle in enumerate(self._handles):
            activity = _value(smi.amdsmi_get_gpu_activity, handle) or {}
            vram = _value(smi.amdsmi_get_gpu_vram_usage, handle) or {}
            power = _value(smi.amdsmi_get_power_info, handle) or {}
            asic = _value(smi.amdsmi_get_gpu_asic_info, handle) or {}
            processes = _value(smi.amdsmi_get_gpu_process_list, handle)
            watts = _number(power.get("current_socket_power"))
            if watts is None:
                watts = _number(power.get("average_socket_power"))
            used, total = _number(vram.get("vram_used")), _number(vram.get("vram_total"))
            samples.append(
                GpuSample(
                    index=index,
                    name=str(asic.get("market_name") or "AMD GPU"),
                    utilization_percent=_number(activity.get("gfx_activity")),
                    memory_used_bytes=None if used is None else int(used * _MIB),
                    memory_total_bytes=None if total is None else int(total * _MIB),
                    power_watts=watts,
                    pids=tuple(_pids(processes)),
                )
            )
        return tuple(samples)

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self._smi.amdsmi_shut_down()


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) else None


def _pids(processes: Any) -> list[int]:
    """amdsmi returns process info dicts (newer) or handles (older); keep what has a pid."""
    pids = []
    for process in processes or ():
        pid = process.get("pid") if isinstance(process, dict) else None
        if isinstance(pid, int):
            pids.append(pid)
    return pids


class NoGpus:
    """A node without a GPU library or without GPUs: CPU and memory samples only."""

    def read(self) -> tuple[GpuSample, ...]:
        return ()

    def close(self) -> None:
        return None


def open_gpu_reader() -> GpuReader:
    """The reader for this node's GPUs: NVML, then AMD SMI, else none."""
    for module, reader in (("pynvml", NvidiaReader), ("amdsmi", AmdReader)):
        if importlib.util.find_spec(module) is None:
            continue
        try:
            opened: GpuReader = reader()
        except Exception:  # library present, driver or device absent (e.g. a login node)
            continue
        return opened
    return NoGpus()
