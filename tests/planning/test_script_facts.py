"""What `submit` reads in a training script, and what it decides from it, for scripts in the
shapes users bring: the LUMI AI guide's (a helper module found through sys.path,
set_device(LOCAL_RANK), DeepSpeed without --local_rank), CSC's (DeepSpeed with --local_rank),
seed 003's cuda:0 behind a visibility wrapper, and scaletrain's own examples."""

from __future__ import annotations

from pathlib import Path

import pytest

from scaletrain.core.errors import ScaletrainError
from scaletrain.planning.modes import launch_mode
from scaletrain.planning.script_facts import ScriptFacts, read_script_facts
from scaletrain.planning.script_launch import Decision, local_rank_option, visible_gpus
from tests.conftest import REPO

GUIDE_DDP = """
import os
import sys
import torch
import torch.distributed as dist
import torchvision.transforms as transforms

sys.path.append(os.path.abspath(os.path.join(os.path.dirname(__file__), "..")))
from resources.hdf5_dataset import HDF5Dataset

if __name__ == "__main__":
    dist.init_process_group(backend="nccl")
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
"""

GUIDE_DEEPSPEED = """
import argparse
import os
import deepspeed
import torch

if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser = deepspeed.add_config_arguments(parser)
    args = parser.parse_args()
    torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
"""

CSC_DEEPSPEED = """
import argparse
import deepspeed

parser = argparse.ArgumentParser()
parser.add_argument('--local_rank', type=int, default=-1,
                    help='local rank passed from distributed launcher')
parser = deepspeed.add_config_arguments(parser)
"""

SELECT_GPU = """
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
model = torch.nn.Linear(4, 4).to("cuda:0")  # each task sees one GCD (select_gpu wrapper)
# torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))  -- not what this script does
"""

LIGHTNING = """
import lightning as L
import mymodels

trainer = L.Trainer(devices=8, num_nodes=2, strategy="ddp")
trainer.fit(mymodels.Net(), ckpt_path="last")
"""


def facts_of(source: str, folder: Path, name: str = "train.py") -> ScriptFacts:
    script = folder / name
    script.write_text(source)
    return read_script_facts(script)


def test_the_lumi_guides_ddp_script(tmp_path: Path) -> None:
    facts = facts_of(GUIDE_DDP, tmp_path)
    assert facts.imports == ("resources", "torch", "torchvision")
    # `resources` is the guide's own folder, found through sys.path: not a package.
    assert facts.unknown_imports == ("resources",)
    assert facts.device_by_local_rank == ("LOCAL_RANK", "local_rank")
    assert facts.resumes == ()
    srun = launch_mode("srun")
    decided = visible_gpus(srun, facts, None)
    assert decided.value is False  # every GPU visible: set_device(LOCAL_RANK) finds its own
    assert (
        decided.why == "every GPU of the node: the script reads LOCAL_RANK, local_rank to pick one"
    )


def test_deepspeed_gets_local_rank_only_where_its_parser_takes_it(tmp_path: Path) -> None:
    deepspeed = launch_mode("deepspeed")
    guide = facts_of(GUIDE_DEEPSPEED, tmp_path, "guide.py")
    assert (guide.local_rank_option, guide.parses_arguments) == (None, True)
    assert local_rank_option(deepspeed, guide, None).value is None
    csc = facts_of(CSC_DEEPSPEED, tmp_path, "csc.py")
    assert csc.local_rank_option == "--local_rank"
    why = "--local_rank=<local rank>: the script's parser takes it"
    assert local_rank_option(deepspeed, csc, None) == Decision("--local_rank", why)
    hyphen = facts_of(CSC_DEEPSPEED.replace("--local_rank", "--local-rank"), tmp_path, "h.py")
    assert local_rank_option(deepspeed, hyphen, None).value == "--local-rank"
    # Forced either way.
    assert local_rank_option(deepspeed, guide, True).value == "--local_rank"
    assert local_rank_option(deepspeed, csc, False).value is None
    with pytest.raises(ScaletrainError, match="--local-rank-arg passes DeepSpeed's --local_rank"):
        local_rank_option(launch_mode("torchrun"), csc, True)


def test_a_script_that_uses_cuda_0_sees_only_its_own_gpu_under_srun(tmp_path: Path) -> None:
    facts = facts_of(SELECT_GPU, tmp_path)
    # The commented-out line is not what the script does.
    assert (facts.device_zero, facts.device_by_local_rank) == (("cuda:0",), ())
    srun = launch_mode("srun")
    assert visible_gpus(srun, facts, None).value is True
    assert visible_gpus(srun, facts, "node").value is False
    # Modes where a launcher picks the device by local rank never narrow.
    assert visible_gpus(launch_mode("torchrun"), facts, None).value is False
    with pytest.raises(ScaletrainError, match="--visible-gpus own needs a mode where srun"):
        visible_gpus(launch_mode("torchrun"), facts, "own")
    with pytest.raises(ScaletrainError, match="--visible-gpus 'all' is not one of node, own"):
        visible_gpus(srun, facts, "all")


def test_what_resumes(tmp_path: Path) -> None:
    assert facts_of(LIGHTNING, tmp_path).resumes == ("Lightning's fit(ckpt_path=...)",)
    assert facts_of(LIGHTNING, tmp_path).unknown_imports == ("mymodels",)
    mnist = read_script_facts(REPO / "examples" / "mnist" / "train.py")
    assert mnist.resumes == ("st.Checkpointer",) and mnist.uses_scaletrain
    commented = "import torch\n# ckpt = st.Checkpointer(model=model)\n"
    assert facts_of(commented, tmp_path).resumes == ()


def test_a_missing_or_broken_script_shows_nothing(tmp_path: Path) -> None:
    assert read_script_facts(tmp_path / "missing.py") == ScriptFacts()
    assert facts_of("def broken(:\n", tmp_path) == ScriptFacts()


def test_a_report_key_named_local_rank_is_no_device_choice(tmp_path: Path) -> None:
    source = SELECT_GPU + 'report = {"rank": 0, "local_rank": 0}\n'
    facts = facts_of(source, tmp_path)
    assert (facts.device_zero, facts.device_by_local_rank) == (("cuda:0",), ())
