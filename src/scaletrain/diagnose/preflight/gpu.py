"""The GPU-only part of the checks: device identities, NCCL/RCCL version, network plugin.

Kept apart because CI has no GPU: what can be tested without one (reading NCCL's log and
the process's loaded libraries) is plain text handling below; the torch.cuda calls are few.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from scaletrain.diagnose.doctor import match_text
from scaletrain.diagnose.preflight.results import CheckResult, fail, ok, warn
from scaletrain.runtime.device import visible_gpus

NAME = "communication"
# The signatures (doctor's table) that mean inter-node traffic goes over TCP sockets.
_FALLBACK_SIGNATURES = ("net-plugin-missing", "network-socket-fallback")
_PLUGIN_LIBRARY = re.compile(r"lib[nr]ccl-net[^/\s]*\.so[.\d]*$")
_NETWORK_LINE = re.compile(r"NCCL INFO Using network (.+)$", re.MULTILINE)


def gpu_identity(properties: Any, index: int, physical: tuple[str, ...], task: str) -> str:
    """What names one GPU the same way in every task of a node, so that two ranks on one GPU
    show up: its UUID, else its PCI address, else its number in the visibility variables.
    Without any of them the identity is this task's own (`task`): then no two tasks look
    alike, and sharing cannot be seen, rather than every one-GPU task looking like `#0`."""
    uuid = str(getattr(properties, "uuid", "") or "").strip("0-")
    if uuid:
        return f"GPU-{properties.uuid}"
    bus = getattr(properties, "pci_bus_id", None)
    if isinstance(bus, int):
        domain, device = (
            getattr(properties, "pci_domain_id", 0),
            getattr(properties, "pci_device_id", 0),
        )
        return f"{properties.name} at PCI {domain:04x}:{bus:02x}:{device:02x}"
    if index < len(physical):
        return f"{properties.name} {physical[index]}"
    return f"{properties.name} #{index} of {task}"


def gpu_identities(torch: ModuleType, environ: Mapping[str, str], task: str) -> tuple[str, ...]:
    """One identity per GPU torch sees, in torch's order (see gpu_identity)."""
    if not torch.cuda.is_available():
        return ()
    physical = visible_gpus(environ) or ()
    return tuple(
        gpu_identity(torch.cuda.get_device_properties(index), index, physical, task)
        for index in range(torch.cuda.device_count())
    )


def collective_library(torch: ModuleType) -> str:
    """'NCCL 2.21.5' or 'RCCL 2.20.5' (ROCm builds report RCCL through torch.cuda.nccl)."""
    if not torch.cuda.is_available():
        return ""
    version = ".".join(str(part) for part in torch.cuda.nccl.version())
    return f"{'RCCL' if torch.version.hip else 'NCCL'} {version}"


def nccl_debug_variables(environ: Mapping[str, str], folder: Path) -> dict[str, str]:
    """Ask NCCL for its init log in a file of ours, unless the user set NCCL_DEBUG."""
    if "NCCL_DEBUG" in environ:
        return {}
    return {
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,NET",
        "NCCL_DEBUG_FILE": str(folder / "nccl-%h-%p.log"),  # %h host, %p process id
    }


def read_nccl_log(folder: Path, pid: int) -> str:
    return "".join(path.read_text(errors="replace") for path in folder.glob(f"nccl-*-{pid}.log"))


def loaded_net_plugins(maps: str) -> list[str]:
    """Network plugin libraries (libnccl-net*.so, librccl-net*.so) in /proc/<pid>/maps text."""
    found = {Path(line.split()[-1]).name for line in maps.splitlines() if line.strip()}
    return sorted(name for name in found if _PLUGIN_LIBRARY.search(name))


def check_communication(
    *,
    backend: str,
    library: str,
    plugins: list[str],
    nccl_log: str,
    multi_node: bool,
    expect_plugin: bool,
) -> CheckResult:
    """Backend, library version, and whether inter-node traffic would fall back to TCP."""
    if "nccl" not in backend:
        return ok(NAME, f"{backend} on CPU (no NCCL/RCCL)")
    network = _NETWORK_LINE.findall(nccl_log)
    seen = (
        f"{library}; net plugin: {', '.join(plugins) or 'none loaded'}; "
        f"network: {network[-1].strip() if network else 'not logged'}"
    )
    fallback = [found for found in match_text(nccl_log) if found.id in _FALLBACK_SIGNATURES]
    if plugins or not fallback or not multi_node:
        return ok(NAME, seen)
    if expect_plugin:
        return fail(NAME, seen, fallback[0].signature.fix)
    return warn(NAME, seen, fallback[0].signature.fix)
