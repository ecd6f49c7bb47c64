"""The GPU-only part of the checks: device identities, NCCL/RCCL version, network plugin.

Kept apart because CI has no GPU: what can be tested without one (reading NCCL's log and
the process's loaded libraries) is plain text handling below; the torch.cuda calls are few.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

from scaletrain.diagnose.doctor import match_text
from scaletrain.diagnose.preflight.results import CheckResult, fail, ok, warn

NAME = "communication"
# The signatures (doctor's table) that mean inter-node traffic goes over TCP sockets.
_FALLBACK_SIGNATURES = ("net-plugin-missing", "network-socket-fallback")
_PLUGIN_LIBRARY = re.compile(r"lib[nr]ccl-net[^/\s]*\.so[.\d]*$")
_NETWORK_LINE = re.compile(r"NCCL INFO Using network (.+)$", re.MULTILINE)


def gpu_identities(torch: ModuleType) -> tuple[str, ...]:
    """One identity per visible GPU: its UUID, which is the same whatever the visibility."""
    if not torch.cuda.is_available():
        return ()
    identities = []
    for index in range(torch.cuda.device_count()):
        properties = torch.cuda.get_device_properties(index)
        uuid = getattr(properties, "uuid", None)
        identities.append(f"GPU-{uuid}" if uuid else f"{properties.name} #{index}")
    return tuple(identities)


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
