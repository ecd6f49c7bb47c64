"""CSC's accelerate FSDP config (seed 004) and an unchanged Hugging Face-style script.

accelerate's FSDP needs GPUs ("There are currently no available devices found"), so here the
config is checked as accelerate itself reads it, and the unchanged script trains as 2 CPU
processes the way a generated accelerate job on CPUs starts it (ACCELERATE_USE_CPU, from
planning/modes.toml); FSDP through accelerate is listed in docs/strategies.md as not run here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.conftest import REPO, clean_environ, scaletrain

pytestmark = [pytest.mark.multiprocess, pytest.mark.long]

EXAMPLE = REPO / "examples" / "accelerate_fsdp"


def test_the_seed_config_is_an_fsdp_config_to_accelerate() -> None:
    from accelerate.commands.config.config_args import load_config_from_file

    config = load_config_from_file(str(EXAMPLE / "fsdp_config.yaml"))
    assert config.distributed_type == "FSDP" and config.mixed_precision == "bf16"
    assert config.fsdp_config["fsdp_auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    assert config.fsdp_config["fsdp_state_dict_type"] == "SHARDED_STATE_DICT"


def test_unchanged_script_trains_on_two_processes(tmp_path: Path) -> None:
    from pydoc_data.topics import topics

    text = tmp_path / "corpus.txt"
    text.write_text("\n\n".join(topics[name] for name in sorted(topics))[:50_000])
    result = scaletrain(
        "run", "--nproc", "2", "--name", "hf", str(EXAMPLE / "train_hf.py"), "--text", str(text),
        cwd=tmp_path, environ=clean_environ(ACCELERATE_USE_CPU="true"),
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "2 processes, DistributedType.MULTI_CPU" in result.stdout
    losses = [float(loss) for loss in re.findall(r"epoch \d: loss ([\d.]+)", result.stdout)]
    assert len(losses) == 2 and losses[1] < losses[0] < 5.55  # ln 256 before training
