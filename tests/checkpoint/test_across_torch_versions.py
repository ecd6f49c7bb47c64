"""Checkpoints across torch releases, as users meet them when a site updates its image or
module: a run written by the oldest torch the package declares resumes under the newest (DDP
and FSDP, 2 ranks), and its export loads in plain torch.load under each. The other way, where
the older torch cannot read the newer one's metadata, resume and export say so, naming both
releases, and leave the checkpoint as it is.

The two torch releases live in venvs of their own, which scripts/test.sh makes
(.venv-torch-<release>) and names in SCALETRAIN_TORCH_VENVS, oldest first; without them the
test is skipped, saying so.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from tests.conftest import PROCESS_TIMEOUT_S, REPO, WORKERS, clean_environ, free_port

VENVS = [REPO / venv for venv in os.environ.get("SCALETRAIN_TORCH_VENVS", "").split()]
WORKER = WORKERS / "strategy_resume.py"

pytestmark = [
    pytest.mark.multiprocess,
    pytest.mark.skipif(
        len(VENVS) != 2,
        reason="needs SCALETRAIN_TORCH_VENVS='<oldest venv> <newest venv>' (scripts/test.sh)",
    ),
]


def release(venv: Path) -> str:
    shown = subprocess.run(
        [venv / "bin" / "python", "-c", "import torch; print(torch.__version__)"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return shown.stdout.strip()


def train(venv: Path, run: Path, strategy: str, epochs: int) -> subprocess.CompletedProcess[str]:
    """strategy_resume.py as 2 processes under `venv`'s torchrun (its scratch folders in the
    test's own TMPDIR)."""
    scratch = run.parent / "tmp"
    scratch.mkdir(parents=True, exist_ok=True)
    return subprocess.run(
        [
            *(venv / "bin" / "python", "-m", "torch.distributed.run", "--nproc_per_node=2"),
            *(f"--master_port={free_port()}", str(WORKER), f"--run-dir={run}"),
            *(f"--epochs={epochs}", f"--options={json.dumps({'strategy': strategy})}"),
        ],
        env=clean_environ(TMPDIR=str(scratch)),
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT_S,
        check=False,
    )


def export(venv: Path, run: Path, folder: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [venv / "bin" / "scaletrain", "export", "--runs-dir", str(run.parent), run.name],
        cwd=folder,
        env=clean_environ(),
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT_S,
        check=False,
    )


def loads(venv: Path, file: Path) -> int:
    """How many tensors plain torch.load (weights only) finds in `file` under `venv`."""
    shown = subprocess.run(
        [venv / "bin" / "python", "-c",
         f"import torch; print(len(torch.load({str(file)!r}, weights_only=True)))"],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return int(shown.stdout)


def exported_file(result: subprocess.CompletedProcess[str], run: Path) -> Path:
    assert result.returncode == 0, result.stderr[-2000:]
    (file,) = (run / "export").glob("model-*.pt")
    return file


@pytest.mark.parametrize("strategy", ["ddp", "fsdp"])
def test_the_oldest_torchs_checkpoint_resumes_and_exports_under_the_newest(
    strategy: str, tmp_path: Path
) -> None:
    oldest, newest = VENVS
    run = tmp_path / "runs" / "older"
    first = train(oldest, run, strategy, epochs=1)
    assert first.returncode == 0, first.stderr[-3000:]
    later = train(newest, run, strategy, epochs=2)
    assert later.returncode == 0, later.stderr[-3000:]
    assert "resumed from" in later.stderr and "(step 4, epoch 1" in later.stderr
    steps = [json.loads(line)["step"] for line in (run / "losses.jsonl").read_text().splitlines()]
    assert steps == list(range(1, 9))  # 4 steps per epoch, the second epoch after the resume
    # The export of each release loads in plain torch.load under the other.
    written_by_newest = exported_file(export(newest, run, tmp_path), run)
    assert loads(oldest, written_by_newest) == loads(newest, written_by_newest) > 0


def test_the_newest_torchs_checkpoint_is_refused_by_the_oldest_naming_both(
    tmp_path: Path,
) -> None:
    oldest, newest = VENVS
    run = tmp_path / "runs" / "newer"
    first = train(newest, run, "fsdp", epochs=1)
    assert first.returncode == 0, first.stderr[-3000:]
    saved = sorted(path.name for path in (run / "checkpoints").iterdir())
    refused = train(oldest, run, "fsdp", epochs=2)
    assert refused.returncode != 0
    expected = (
        f"was written by torch {release(newest)}, and this torch {release(oldest)} cannot read it"
    )
    assert expected in refused.stderr and "It is left as it is." in refused.stderr
    assert "HINT: resume or export it with torch" in refused.stderr
    # Nothing set aside as damaged, nothing deleted.
    assert sorted(path.name for path in (run / "checkpoints").iterdir()) == saved
    exported = export(oldest, run, tmp_path)
    assert exported.returncode == 2 and expected in exported.stderr, exported.stderr[-2000:]
