"""What a checkpoint costs: training stall of a synchronous vs an asynchronous save, and save
throughput next to a plain file write and torch.save of the same bytes, all in one run.

    .venv/bin/python benchmarks/checkpoint_cost.py            # ~400 MB of state, ~1 minute
    .venv/bin/python benchmarks/checkpoint_cost.py --layers 4 # smaller

A model of `layers` Linear(width, width) layers trains with Adam (state = 3 × weights:
8 × 2048² fp32 weights = 134 MB, 403 MB with Adam's two moments). The loop goes through
scaletrain's Checkpointer exactly as a user's would; the stall of a save is how much longer
the training loop took than without it: for a synchronous save the step at which it saves,
for an asynchronous one that step (the copy to CPU memory) plus the slowdown of the steps
that run while the background thread writes. Writes JSON to benchmarks/results/.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch
from torch import nn

import scaletrain as st

RESULTS = Path(__file__).resolve().parent / "results"


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=8)
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--saves", type=int, default=3, help="saves measured per mode")
    parser.add_argument("--steps-between", type=int, default=12, help="steps between saves")
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: tmp)")
    return parser.parse_args()


def build(args: argparse.Namespace, env: st.DistEnv) -> tuple[nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = st.wrap(nn.Sequential(*(nn.Linear(args.width, args.width) for _ in range(args.layers))))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    return model, optimizer


def train(args: argparse.Namespace, env: st.DistEnv, run_dir: Path, *, mode: str) -> dict[str, Any]:
    """Train with a save every `steps_between` steps; time from each batch to the next."""
    model, optimizer = build(args, env)
    ckpt = st.Checkpointer(
        model=model,
        optimizer=optimizer,
        every_steps=args.steps_between,
        every_minutes=None,
        keep=1,
        asynchronous=mode == "async",
        enabled=mode != "none",
        run_dir=run_dir,
    )
    inputs = torch.randn(args.batch, args.width, device=env.device)
    # One window of steps after each save, to see a background write to its end.
    steps = args.steps_between * (args.saves + 1)
    arrivals = []
    for batch in ckpt.batches([inputs] * steps):
        arrivals.append(time.perf_counter())
        loss = model(batch).square().mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        if env.device.type == "cuda":
            torch.cuda.synchronize()  # the step's real end, not its launch
    ckpt.save(reason="benchmark end")
    folder = run_dir / "checkpoints"
    size = sum(file.stat().st_size for file in folder.rglob("*") if file.is_file())
    # intervals[i]: step i + 1 and the boundary after it (where a save after that step runs)
    return {"intervals_s": [b - a for a, b in itertools.pairwise(arrivals)], "bytes": size}


def stalls(intervals: list[float], baseline: float, every: int, saves: int) -> list[float]:
    """Extra time per save: the steps from a save to the next one, minus as many plain steps."""
    result = []
    for number in range(1, saves + 1):
        window = intervals[number * every - 1 : (number + 1) * every - 1]
        result.append(sum(window) - baseline * len(window))
    return result


def plain_write(path: Path, size: int) -> float:
    """Seconds to write and fsync `size` bytes to one file."""
    data = os.urandom(min(size, 64 * 1024 * 1024))
    started = time.perf_counter()
    with path.open("wb") as file:
        written = 0
        while written < size:
            written += file.write(data[: size - written])
        file.flush()
        os.fsync(file.fileno())
    return time.perf_counter() - started


def torch_save(path: Path, model: nn.Module, optimizer: torch.optim.Optimizer) -> float:
    """Seconds for torch.save of the same state to one file, fsynced."""
    started = time.perf_counter()
    with path.open("wb") as file:
        torch.save({"model": model.state_dict(), "optimizer": optimizer.state_dict()}, file)
        file.flush()
        os.fsync(file.fileno())
    return time.perf_counter() - started


def main() -> None:
    args = parse_args()
    env = st.init()
    work = Path(tempfile.mkdtemp(prefix="checkpoint-cost-", dir=args.dir))
    runs = {mode: train(args, env, work / mode, mode=mode) for mode in ("none", "sync", "async")}
    baseline = statistics.median(runs["none"]["intervals_s"])
    size = runs["sync"]["bytes"]
    sync = stalls(runs["sync"]["intervals_s"], baseline, args.steps_between, args.saves)
    asynchronous = stalls(runs["async"]["intervals_s"], baseline, args.steps_between, args.saves)
    blocked = [
        runs["async"]["intervals_s"][number * args.steps_between - 1] - baseline
        for number in range(1, args.saves + 1)
    ]
    model, optimizer = build(args, env)
    model(torch.randn(args.batch, args.width, device=env.device)).sum().backward()
    optimizer.step()  # Adam's moments exist: the same bytes as the checkpoints
    write_s = plain_write(work / "plain.bin", size)
    torch_s = torch_save(work / "torch.pt", model, optimizer)
    sync_s = statistics.median(sync)
    result = {
        "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": {
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "device": str(env.device),
            "torch": torch.__version__,
            "scaletrain": st.__version__,
            "folder": str(work.parent),
        },
        "settings": vars(args) | {"dir": str(args.dir)},
        "checkpoint_mb": size / 1e6,
        "step_s": baseline,
        "sync_stall_s": sync,
        "async_stall_s": asynchronous,
        "async_blocked_s": blocked,
        "sync_save_mb_per_s": size / 1e6 / sync_s,
        "plain_write_mb_per_s": size / 1e6 / write_s,
        "torch_save_mb_per_s": size / 1e6 / torch_s,
    }
    RESULTS.mkdir(exist_ok=True)
    out = RESULTS / "checkpoint_cost.json"
    out.write_text(json.dumps(result, indent=2) + "\n")
    shutil.rmtree(work)
    show(result, out)
    st.shutdown()


def show(result: dict[str, Any], out: Path) -> None:
    median = statistics.median
    rows = [
        ("checkpoint size", f"{result['checkpoint_mb']:,.0f} MB"),
        ("training step (no save)", f"{result['step_s'] * 1000:,.0f} ms"),
        ("stall, synchronous save", f"{median(result['sync_stall_s']):.2f} s"),
        ("stall, asynchronous save (total)", f"{median(result['async_stall_s']):.2f} s"),
        ("  of which the loop was blocked", f"{median(result['async_blocked_s']):.2f} s"),
        ("save throughput (scaletrain, sync)", f"{result['sync_save_mb_per_s']:,.0f} MB/s"),
        ("plain file write, same bytes", f"{result['plain_write_mb_per_s']:,.0f} MB/s"),
        ("torch.save, same state", f"{result['torch_save_mb_per_s']:,.0f} MB/s"),
    ]
    width = max(len(name) for name, _ in rows)
    for name, value in rows:
        print(f"{name:<{width}}  {value:>12}")
    print(f"results: {out}")


if __name__ == "__main__":
    main()
