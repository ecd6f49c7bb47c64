"""With default settings the Checkpointer uses DCP's public API alone: no module of the
checkpoint package outside direct/ names a private torch entry point, and save,
asynchronous save, resume at another world size and strategy, and export all run with the
direct storage unimportable."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

import scaletrain.checkpoint
from scaletrain.checkpoint.direct.torch_private import TESTED_TORCH_VERSIONS
from scaletrain.checkpoint.export import read_model
from scaletrain.checkpoint.storage import direct_unusable_because
from tests.conftest import PROCESS_TIMEOUT_S, WORKERS, clean_environ, torchrun

PACKAGE = Path(scaletrain.checkpoint.__file__).parent
BLOCKING = WORKERS / "without_direct_storage.py"
WORKER = WORKERS / "strategy_resume.py"
# DeepSpeed's partitions are saved as torch's ShardedTensor (torch.distributed._shard), for
# a DeepSpeed engine only: a model of DDP, FSDP, HSDP or one process never reaches it.
OUTSIDE_THE_DEFAULT = {"deepspeed_state.py"}


def private_torch_names(source: str) -> list[str]:
    """Every private torch entry point a module's source names: imports of torch modules or
    names beginning with an underscore, and attributes such as torch._C."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "torch":
            module = node.module or ""
            names = [alias.name for alias in node.names]
            if any(part.startswith("_") for part in module.split(".")):
                found.append(module)
            found += [f"{module}.{name}" for name in names if name.startswith("_")]
        elif isinstance(node, ast.Import):
            found += [
                alias.name
                for alias in node.names
                if alias.name.split(".")[0] == "torch"
                and any(part.startswith("_") for part in alias.name.split("."))
            ]
        elif (
            isinstance(node, ast.Attribute)
            and _torch_chain(node)
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            found.append(node.attr)
    return found


def _torch_chain(node: ast.Attribute) -> bool:
    """Whether an attribute chain starts at the name `torch` (torch.x.y)."""
    value: ast.expr = node.value
    while isinstance(value, ast.Attribute):
        value = value.value
    return isinstance(value, ast.Name) and value.id == "torch"


def test_the_scan_finds_private_names() -> None:
    source = (
        "import torch\nfrom torch.distributed._shard._utils import narrow_tensor_by_index\n"
        "from torch.distributed.checkpoint.utils import _create_file_view\n"
        "reader = torch._C.PyTorchFileReader\n"
    )
    assert private_torch_names(source) == [
        "torch.distributed._shard._utils",
        "torch.distributed.checkpoint.utils._create_file_view",
        "_C",
    ]


def test_no_module_outside_the_direct_storage_names_a_private_torch_entry_point() -> None:
    modules = [path for path in PACKAGE.glob("*.py") if path.name not in OUTSIDE_THE_DEFAULT]
    assert len(modules) > 10
    found = {path.name: private_torch_names(path.read_text()) for path in modules}
    assert {name: names for name, names in found.items() if names} == {}
    assert private_torch_names((PACKAGE / "direct" / "torch_private.py").read_text())


def test_the_direct_storage_runs_only_on_the_torch_versions_it_was_tested_on() -> None:
    tested = TESTED_TORCH_VERSIONS[0]
    assert direct_unusable_because(f"{tested}+cu130") is None
    assert direct_unusable_because("2.99.0") == (
        f"was tested on torch {', '.join(TESTED_TORCH_VERSIONS)}, not on 2.99.0"
    )


def start(
    run: Path, nproc: int, options: dict[str, Any], epochs: int, *, blocked: bool = True
) -> subprocess.CompletedProcess[str]:
    """strategy_resume.py at `nproc` ranks; `blocked`: with the direct storage unimportable."""
    arguments = [f"--run-dir={run}", f"--epochs={epochs}", f"--options={json.dumps(options)}"]
    if blocked:
        return torchrun(BLOCKING, str(WORKER), *arguments, nproc=nproc)
    return torchrun(WORKER, *arguments, nproc=nproc)


def train(run: Path, nproc: int, options: dict[str, Any], epochs: int, *, blocked: bool) -> str:
    result = start(run, nproc, options, epochs, blocked=blocked)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stderr


def losses(run: Path) -> list[float]:
    lines = [json.loads(line) for line in (run / "losses.jsonl").read_text().splitlines()]
    return [line["loss"] for line in lines]


@pytest.mark.multiprocess
@pytest.mark.long
def test_save_resume_reshard_and_export_run_without_the_direct_storage(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    train(runs / "uninterrupted", 1, {}, epochs=2, blocked=False)
    # 2 ranks of DDP: an asynchronous save at step 3, a synchronous one at step 4 (epoch's end).
    saving = {"checkpointer": {"asynchronous": True, "every_steps": 3}}
    train(runs / "dcp", 2, {"strategy": "ddp"} | saving, epochs=1, blocked=True)
    # 3 ranks of FSDP resume the second epoch from 2 ranks of DDP.
    resumed = train(runs / "dcp", 3, {"strategy": "fsdp"}, epochs=2, blocked=True)
    assert "(step 4, epoch 1, saved by 2 process(es), now 3)" in resumed
    assert losses(runs / "dcp") == pytest.approx(losses(runs / "uninterrupted"), rel=1e-5)

    export = [sys.executable, str(BLOCKING), "scaletrain", "export", "--runs-dir", str(runs), "dcp"]
    exported = subprocess.run(
        export, capture_output=True, text=True, timeout=PROCESS_TIMEOUT_S, env=clean_environ()
    )
    assert exported.returncode == 0, exported.stderr
    weights = torch.load(runs / "dcp" / "export" / "model-step-0000008.pt", weights_only=True)
    expected = read_model(runs / "uninterrupted" / "checkpoints" / "step-0000008")
    assert weights.keys() == expected.keys()
    for key, tensor in expected.items():
        torch.testing.assert_close(weights[key], tensor, rtol=1e-5, atol=1e-5)

    # The block is real: the direct storage, asked for, cannot be imported, and the run
    # saves through DCP's public API instead, with one notice.
    direct = start(runs / "direct", 1, {"checkpointer": {"storage": "direct"}}, epochs=1)
    assert direct.returncode == 0, direct.stderr[-3000:]
    notice = "scaletrain: storage='direct' cannot run on torch"
    assert direct.stderr.count(notice) == 1
    assert "scaletrain.checkpoint.direct is blocked" in direct.stderr
