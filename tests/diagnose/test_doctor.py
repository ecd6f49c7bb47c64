"""`scaletrain doctor` on a realistic log line for every signature, and on a healthy log."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from scaletrain.diagnose.doctor import diagnose_files, load_signatures, match_text
from tests.conftest import REPO, scaletrain

FIXTURES = REPO / "tests" / "fixtures" / "doctor"
SIGNATURES = load_signatures()


def fixture_for(signature_id: str) -> Path:
    return next(FIXTURES.glob(f"{signature_id}.*"))


@pytest.mark.parametrize("signature", SIGNATURES, ids=lambda signature: signature.id)
def test_every_signature_matches_its_sample_and_nothing_else(signature) -> None:  # type: ignore[no-untyped-def]
    sample = fixture_for(signature.id)
    assert "# source:" in sample.read_text(), f"{sample.name} must say where its lines come from"
    assert [finding.id for finding in diagnose_files([sample])] == [signature.id]
    assert signature.cause and signature.fix and signature.title


def test_a_healthy_log_matches_nothing() -> None:
    assert diagnose_files([FIXTURES / "healthy.log"]) == []


def test_a_script_that_calls_set_epoch_is_fine(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    text = fixture_for("forgotten-set-epoch").read_text()
    script.write_text(text + "\nfor epoch in range(3):\n    sampler.set_epoch(epoch)\n")
    assert diagnose_files([script]) == []


def test_out_of_memory_shows_the_per_rank_picture(tmp_path: Path) -> None:
    result = scaletrain("doctor", str(fixture_for("gpu-out-of-memory")), cwd=tmp_path)
    assert result.returncode == 1
    out = result.stdout  # the findings are the result
    assert "gpu-out-of-memory: GPU out of memory (2 line(s) on rank(s) 3, 5)" in out
    assert "fix: Lower the per-GPU batch" in out
    rows = [line.split() for line in out.splitlines() if line.startswith(("3 ", "5 "))]
    assert rows == [
        ["3", "HIP", "16.00", "GiB", "0", "63.98", "GiB", "1.09", "GiB"],
        ["5", "CUDA", "264.00", "MiB", "0", "2.00", "GiB", "145.93", "MiB"],
    ]


def test_healthy_log_says_nothing_matched(tmp_path: Path) -> None:
    result = scaletrain("doctor", str(FIXTURES / "healthy.log"), cwd=tmp_path)
    assert result.returncode == 0
    assert "no known failure signature in 1 file(s)" in result.stderr


def test_a_run_folder_is_read_with_its_rank_logs_and_script(tmp_path: Path) -> None:
    run = tmp_path / "runs" / "broken"
    (run / "logs").mkdir(parents=True)
    timeout_lines = fixture_for("collective-timeout").read_text()
    (run / "logs" / "rank-1.err").write_text(timeout_lines)
    script = fixture_for("forgotten-set-epoch")
    record = {"command": ["python", "-m", "x", "--standalone", "--", str(script)]}
    (run / "run.json").write_text(json.dumps(record))
    result = scaletrain("doctor", str(run), cwd=tmp_path)
    assert result.returncode == 1
    assert "collective-timeout: A collective timed out" in result.stdout
    assert "forgotten-set-epoch: DistributedSampler without set_epoch" in result.stdout
    assert f"{run}/logs/rank-1.err:3:" in result.stdout


def test_missing_target_is_one_clean_error(tmp_path: Path) -> None:
    result = scaletrain("doctor", "nope.log", cwd=tmp_path)
    assert result.returncode == 2
    assert "'nope.log' is neither a log file nor a run folder" in result.stderr


def test_nccl_init_log_with_a_plugin_is_not_a_fallback() -> None:
    # What aws-ofi-rccl prints when it is loaded (shared/seeds/003).
    assert match_text("[0] NCCL INFO NET/OFI Using aws-ofi-rccl 1.4.0") == []


def test_the_doctor_starts_without_torch() -> None:
    probe = (
        "import sys\n"
        "from scaletrain.cli.start import main\n"
        f"sys.argv = ['scaletrain', 'doctor', {str(FIXTURES / 'healthy.log')!r}]\n"
        "try:\n    main()\n    code = 0\nexcept SystemExit as ended:\n    code = ended.code\n"
        "print('exit', code, 'torch' in sys.modules, 'matplotlib' in sys.modules)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60
    )
    # The doctor ran to its verdict (a healthy log: exit 0, nothing matched) without torch.
    assert "no known failure signature in 1 file(s)" in result.stderr
    assert result.stdout.strip().splitlines()[-1] == "exit 0 False False"


def test_a_log_that_ends_in_an_unknown_error_is_a_failure(tmp_path: Path) -> None:
    log = fixture_for("python-error")
    result = scaletrain("doctor", str(log), cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    said = result.stdout  # the findings are the result
    assert (
        "python-error: A Python error that no signature explains (1 line(s) on rank(s) 1)" in said
    )
    # The rank's error, not torchrun's ChildFailedError that follows it.
    assert f"{log}:11: [rank1]: KeyError: 2" in said
    rows = [line.split(None, 1) for line in said.splitlines() if line.startswith("1 ")]
    assert rows == [["1", "KeyError: 2  /users/me/mnist/train.py:8 in load_batch"]]
    assert "no known failure signature" not in result.stderr


@pytest.mark.multiprocess
def test_a_local_run_that_failed_is_not_healthy(tmp_path: Path) -> None:
    script = tmp_path / "train.py"
    script.write_text(
        "import os\n\nbatches = {}\nif os.environ['RANK'] == '1':\n    batches['next']\n"
    )
    run = scaletrain("run", "--nproc", "2", "--name", "broken", str(script), cwd=tmp_path)
    assert run.returncode == 1, run.stderr
    result = scaletrain("doctor", "runs/broken", cwd=tmp_path)
    assert result.returncode == 1, result.stderr
    said = " ".join(result.stdout.split())
    assert (
        "python-error: A Python error that no signature explains (1 line(s) on rank(s) 1)" in said
    )
    assert "runs/broken/logs/rank-1.err:5: KeyError: 'next'" in said
    assert f"1 KeyError: 'next' {script}:5 in <module>" in said
