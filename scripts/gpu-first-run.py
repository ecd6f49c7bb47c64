"""Run this first on a machine with 2 or more GPUs: it checks the GPU paths that no machine
of this project has run (docs/gpu.md, items 2-4) and prints what it saw.

    .venv/bin/python scripts/gpu-first-run.py          # NVIDIA (NCCL) or AMD (RCCL) GPUs

1. torchrun with 2 processes and 1 visible GPU: scaletrain's own error, before NCCL's
   "Duplicate GPU detected" / ncclInvalidUsage.
2. 2 processes on GPUs 0 and 1: the default group is bound to each rank's GPU (device_id),
   st.barrier() and a NCCL barrier run without torch's "using the device under current
   context" warning, and an all_reduce on each rank's GPU gives the right sum.
3. An asynchronous checkpoint saved by the rank on GPU 1: that process must not appear on
   GPU 0 (torch.cuda.list_gpu_processes, through NVML or amdsmi).
Exit code 0 when everything behaved as documented.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2"]


def run(role: str, folder: Path, **environ: str) -> subprocess.CompletedProcess[str]:
    command = [*TORCHRUN, "--max-restarts=0", __file__, role, str(folder)]
    return subprocess.run(
        command, capture_output=True, text=True, timeout=600, env={**os.environ, **environ}
    )


def ranks_on_two_gpus(folder: Path) -> None:
    """One rank: bound group, barriers, all_reduce, then an asynchronous save."""
    import warnings

    import torch
    import torch.distributed as dist

    import scaletrain as st

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        env = st.init()
        bound = dist.distributed_c10d._get_default_group().bound_device_id
        st.barrier()
        dist.barrier()
        total = torch.ones(1, device=env.device) * (env.rank + 1)
        dist.all_reduce(total)
        model = st.wrap(torch.nn.Linear(1024, 1024))
        ckpt = st.Checkpointer(
            model=model, every_steps=1, asynchronous=True, run_dir=folder / "run"
        )
        for _ in ckpt.batches([0, 1]):
            model(torch.randn(8, 1024, device=env.device)).sum().backward()
        ckpt.save()
    on_gpu_0 = torch.cuda.list_gpu_processes(0)
    record = {
        "device": str(env.device),
        "bound_device_id": str(bound),
        "all_reduce": float(total.item()),
        "barrier_warnings": [str(w.message) for w in caught if "barrier" in str(w.message)],
        "this_process_on_gpu_0": f"process {os.getpid():>10d}" in on_gpu_0,
    }
    (folder / f"rank{env.rank}.json").write_text(json.dumps(record))
    st.shutdown()


def main() -> int:
    import torch

    if torch.cuda.device_count() < 2:
        print("needs 2 or more GPUs; torch sees", torch.cuda.device_count())
        return 2
    failures = []
    folder = Path(tempfile.mkdtemp(prefix="scaletrain-gpu-first-run-"))
    one_gpu = run("two-gpus", folder / "one", CUDA_VISIBLE_DEVICES="0", HIP_VISIBLE_DEVICES="0")
    clear = "but only 1 GPU(s) are visible" in one_gpu.stderr
    print(f"1. two processes, one GPU: {'scaletrain error' if clear else 'NOT the expected error'}")
    if not clear:
        failures.append(one_gpu.stderr[-2000:])
    two = run("two-gpus", folder / "two")
    if two.returncode != 0:
        failures.append(two.stderr[-3000:])
    for rank in range(2):
        path = folder / "two" / f"rank{rank}.json"
        record = json.loads(path.read_text()) if path.is_file() else {}
        print(f"2./3. rank {rank}: {record}")
        expected = {
            "device": f"cuda:{rank}",
            "bound_device_id": f"cuda:{rank}",
            "all_reduce": 3.0,
            "barrier_warnings": [],
            "this_process_on_gpu_0": rank == 0,
        }
        failures += [
            f"rank {rank}: {key}" for key, value in expected.items() if record.get(key) != value
        ]
    print("all as documented" if not failures else "\n".join(["DIFFERENT:", *failures]))
    return 0 if not failures else 1


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "two-gpus":
        Path(sys.argv[2]).mkdir(parents=True, exist_ok=True)
        ranks_on_two_gpus(Path(sys.argv[2]))
    else:
        sys.exit(main())
