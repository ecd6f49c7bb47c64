"""A small valid profile of an imagined site, and a user config folder to put it in."""

from __future__ import annotations

from pathlib import Path

MINIMAL = """
description = "my site"
[node]
gpus = 4
accelerator = "nvidia"
gpu_model = "H100"
usable_cores = 64
usable_memory_gb = 500
[slurm]
gpu_request = "--gres=gpu:h100:{gpus}"
[default_per_gpu]
cores = 16
memory_gb = 120
[billing]
unit = "GPU-hours"
[partitions.gpu]
max_time = "2-00:00:00"
billing = { rule = "sum", units_per_gpu_hour = 1 }
"""


def user_site(tmp_path: Path, name: str, text: str) -> dict[str, str]:
    """An environment whose XDG config folder holds `name`.toml with `text`."""
    folder = tmp_path / "config" / "scaletrain" / "clusters"
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.toml").write_text(text)
    return {"XDG_CONFIG_HOME": str(tmp_path / "config"), "HOME": str(tmp_path)}
