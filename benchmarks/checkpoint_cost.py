"""What a checkpoint costs, at 1, 2 and 4 ranks, in one run (interleaved rounds, medians):

- save and load throughput of scaletrain's Checkpointer next to a plain fsynced write and
  read of the same bytes (each rank its share, in parallel) and next to plain
  torch.distributed.checkpoint (DCP) save/load of the same state with default options;
- for a training loop: how long a synchronous save stalls it, and for an asynchronous save
  (scaletrain's; the least work any asynchronous save does, least_async_save.py; and that
  save's write alone, without its copy and checksum: the disk's share of the floor) how
  long the loop was blocked (the step the save started after, plus any wait of the next
  optimizer step for the background copy of its state) and its total slowdown (the extra
  time, over the same loop's median step once the save is over, of every step the background
  write overlapped, plus any wait for it at the end); and the CPU time each save added to
  rank 0's process over those steps, the writer thread's included.

    .venv/bin/python benchmarks/checkpoint_cost.py             # 201 MB of state, ~15 min
    .venv/bin/python benchmarks/checkpoint_cost.py --layers 8  # 403 MB
    # 2,400 small tensors (20 MB): what a save costs per tensor
    .venv/bin/python benchmarks/checkpoint_cost.py --layers 300 --width 64 \
        --out benchmarks/results/checkpoint_cost_many_tensors.json

Loads read from the disk, not from the page cache: every file is dropped from the cache
(posix_fadvise DONTNEED, after fsync) before each load and each plain read. Each rank is one
torchrun process; a measurement starts together on all ranks and ends with the slowest.
Writes benchmarks/results/checkpoint_cost.json (benchmarks/run_all.py summarizes it), or
the file --out names.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from least_async_save import LeastAsyncSave

RESULTS = Path(__file__).resolve().parent / "results"
SAVES = ("plain write", "plain DCP", "scaletrain")
LOADS = ("plain read", "plain DCP", "scaletrain")
# "least": the least work any asynchronous save does (least_async_save.py), the floor that
# scaletrain's asynchronous save is measured against; "write only": its write alone.
LOOPS = ("synchronous", "asynchronous", "least", "write only")
LEAST_SAVES = ("least", "write only")
# The plain write and read move the same bytes as scaletrain's checkpoint, split over ranks.
_SIZE_OF = {"plain write": "plain", "plain read": "plain"}
# Steps a loop goes on for while a background write is in flight, at most.
MAX_STEPS = 400
# Steps after the save's last one whose median is the loop's own step time without a save;
# the first AFTERMATH_STEPS of them are left out (a save's cache misses can linger).
SETTLED_STEPS, AFTERMATH_STEPS = 14, 2


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--layers", type=int, default=4, help="Linear(width, width) layers")
    parser.add_argument("--width", type=int, default=2048)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--window", type=int, default=24, help="steps measured after a save")
    parser.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: tmp)")
    parser.add_argument(
        "--out", type=Path, default=RESULTS / "checkpoint_cost.json", help="the results file"
    )
    parser.add_argument("--worker-out", type=Path, default=None, help=argparse.SUPPRESS)
    return parser.parse_args()


# ---- inside each rank -------------------------------------------------------------------


def drop_from_cache(folder: Path) -> None:
    """Evict the (fsynced, so clean) pages of every file under `folder` from the page cache."""
    for path in folder.rglob("*"):
        if path.is_file():
            descriptor = os.open(path, os.O_RDONLY)
            os.posix_fadvise(descriptor, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(descriptor)


def timed(action: Callable[[], object]) -> float:
    """Seconds from a common start on all ranks to the end on the slowest one."""
    import scaletrain as st
    from scaletrain.runtime.process_group import all_gather_objects

    st.barrier()
    started = time.perf_counter()
    action()
    return float(max(all_gather_objects(time.perf_counter() - started)))


def folder_bytes(folder: Path) -> int:
    return sum(path.stat().st_size for path in folder.rglob("*") if path.is_file())


def build(args: argparse.Namespace) -> tuple[Any, Any]:
    import torch
    from torch import nn

    import scaletrain as st

    torch.manual_seed(0)
    layers = (nn.Linear(args.width, args.width) for _ in range(args.layers))
    model = st.wrap(nn.Sequential(*layers))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    model(torch.randn(2, args.width)).sum().backward()
    optimizer.step()  # Adam's moments exist: the full state
    return model, optimizer


def throughput_round(args: argparse.Namespace, work: Path, number: int) -> dict[str, Any]:
    """One save and one load of each kind, in an order that turns each round."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    import scaletrain as st
    from scaletrain.checkpoint.layout import CheckpointStore

    env = st.current_env()
    model, optimizer = build(args)
    run_dir = work / "scaletrain"
    ckpt = st.Checkpointer(model=model, optimizer=optimizer, every_minutes=None, run_dir=run_dir)
    dcp_folder = work / "dcp" / f"round-{number}"
    plain = work / f"plain-{env.rank}.bin"
    share = max(1, state_bytes(args) // env.world_size)
    buffer = bytearray(os.urandom(share))

    def plain_write() -> None:
        with plain.open("wb") as file:
            file.write(buffer)
            file.flush()
            os.fsync(file.fileno())

    def plain_read() -> None:
        with plain.open("rb", buffering=0) as file:
            file.readinto(buffer)  # type: ignore[attr-defined]

    def dcp_save() -> None:
        model_state, optimizer_state = get_state_dict(model, optimizer)
        dcp.save({"model": model_state, "optimizer": optimizer_state}, checkpoint_id=dcp_folder)

    def dcp_load() -> None:
        model_state, optimizer_state = get_state_dict(model, optimizer)
        state = {"model": model_state, "optimizer": optimizer_state}
        dcp.load(state, checkpoint_id=dcp_folder)
        set_state_dict(
            model, optimizer, model_state_dict=state["model"], optim_state_dict=state["optimizer"]
        )

    def scaletrain_save() -> None:
        ckpt.step += 1
        ckpt.save(reason="benchmark")

    def scaletrain_load() -> None:
        st.Checkpointer(model=model, optimizer=optimizer, every_minutes=None, run_dir=run_dir)

    saves = {"plain write": plain_write, "plain DCP": dcp_save, "scaletrain": scaletrain_save}
    loads = {"plain read": plain_read, "plain DCP": dcp_load, "scaletrain": scaletrain_load}
    folders = {"plain read": plain, "plain DCP": dcp_folder, "scaletrain": run_dir}
    seconds: dict[str, dict[str, float]] = {"save": {}, "load": {}}
    turn = number % len(SAVES)
    for name in SAVES[turn:] + SAVES[:turn]:
        seconds["save"][name] = timed(saves[name])
    for name in LOADS[turn:] + LOADS[:turn]:
        if env.is_main:
            target = folders[name]
            drop_from_cache(target.parent if target.is_file() else target)
        seconds["load"][name] = timed(loads[name])
    # The checkpoint this round saved and loaded: the run keeps the newest three.
    newest = CheckpointStore(run_dir / "checkpoints").complete()[0]
    size = {
        "scaletrain": folder_bytes(newest),
        "plain DCP": folder_bytes(dcp_folder),
        "plain": share * env.world_size,
    }
    return {"seconds": seconds, "bytes": size}


def share_of(tensors: list[Any], rank: int, world_size: int) -> list[Any]:
    """This rank's share of `tensors`, balanced by bytes as DCP balances the replicated
    tensors of a DDP model between the ranks that write them."""
    shares: list[list[Any]] = [[] for _ in range(world_size)]
    sizes = [0] * world_size
    for tensor in sorted(tensors, key=lambda tensor: tensor.nbytes, reverse=True):
        smallest = sizes.index(min(sizes))
        shares[smallest].append(tensor)
        sizes[smallest] += tensor.nbytes
    return shares[rank]


def loop_round(args: argparse.Namespace, work: Path, mode: str) -> dict[str, Any]:
    """Train `window` steps after one save (synchronous, asynchronous, or the least
    asynchronous one), and on until the loop has run SETTLED_STEPS without a write in flight."""
    import torch

    import scaletrain as st

    model, optimizer = build(args)
    writer: Any
    if mode in LEAST_SAVES:
        env = st.current_env()
        state = [*model.parameters()]
        state += [value for each in optimizer.state.values() for value in each.values()]
        writer = LeastAsyncSave(
            share_of(state, env.rank, env.world_size),
            work / f"least-{env.rank}.bin",
            copy=mode == "least",
        )
        optimizer.register_step_pre_hook(writer.before_step)

        def save(step: int, reason: str) -> None:
            writer.start()
    else:
        ckpt = st.Checkpointer(
            model=model,
            optimizer=optimizer,
            every_minutes=None,
            keep=1,
            asynchronous=mode == "asynchronous",
            run_dir=work / f"loop-{mode}-{time.monotonic_ns()}",
        )
        writer = ckpt._writer

        def save(step: int, reason: str) -> None:
            ckpt.step = step
            ckpt._save(reason, blocking=mode == "synchronous")

    batch = torch.randn(args.batch, args.width)
    warmup = 3
    arrivals, cpu_times, in_flight = [], [], []
    waited_before = 0.0
    step, settled = 0, 0
    # At least `window` steps after the save, on while a background write is in flight on
    # any rank (the slowdown is what the steps it overlaps lose, not a wait for it), and
    # SETTLED_STEPS more after that, for the loop's own step time. Both modes ask (a tiny
    # all_reduce per step), so that the steps stay comparable.
    while (step < warmup + args.window or settled < SETTLED_STEPS) and step < warmup + MAX_STEPS:
        arrivals.append(time.perf_counter())
        cpu_times.append(time.process_time())  # this rank's every thread: the writer's too
        model(batch).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step == 0:
            # A first save, not measured: a run's saves after its first reuse the staging
            # buffers (and the folders exist), and that steady state is what is measured.
            save(1, "benchmark warm-up")
            writer.wait()
            waited_before = writer.waited_for_copy_s
        if step == warmup - 1:
            # One save at a chosen step boundary, as the loop's own boundary would start it.
            save(step + 1, "benchmark")
        step += 1
        writing = st.total(float(mode != "synchronous" and writer.in_flight)) > 0
        in_flight.append(writing)
        settled = 0 if writing else settled + 1
    arrivals.append(time.perf_counter())
    cpu_times.append(time.process_time())
    started = time.perf_counter()
    if mode != "synchronous":
        writer.wait()  # only when the write outlasted MAX_STEPS steps
    final_wait = time.perf_counter() - started

    def per_step(times: list[float]) -> list[float]:
        return [later - earlier for earlier, later in itertools.pairwise(times)][warmup - 1 :]

    return {
        "intervals_s": per_step(arrivals),
        "cpu_s": per_step(cpu_times),
        "in_flight_after": in_flight[warmup - 1 :],
        "final_wait_s": final_wait,
        # An asynchronous save's optimizer steps that waited for its background copy.
        "waited_for_copy_s": writer.waited_for_copy_s - waited_before,
        "final_cpu_s": time.process_time() - cpu_times[-1],
    }


def overlapped(loop: dict[str, Any]) -> list[int]:
    """The steps a save can have slowed: the one it started after, and every step during
    which a background write was in flight (at its start or at its end)."""
    after = loop["in_flight_after"]
    return [0] + [i for i in range(1, len(after)) if after[i - 1] or after[i]]


def own_step_time(values: list[float], counted: list[int]) -> float:
    """The median of a loop's `values` per step after the steps a save `counted`, less the
    first AFTERMATH_STEPS of them: the same loop's step without a save, measured minutes
    closer than another loop's (whose step time here drifts by a fifth between loops)."""
    return statistics.median(values[max(counted) + 1 + AFTERMATH_STEPS :])


def worker(args: argparse.Namespace) -> None:
    import scaletrain as st
    from scaletrain.runtime.process_group import all_gather_objects

    env = st.init()
    made = tempfile.mkdtemp(prefix="checkpoint-cost-", dir=args.dir) if env.is_main else ""
    work = Path(all_gather_objects(made)[0])  # rank 0's folder, on every rank
    rounds = []
    for number in range(args.rounds):
        loops = {}
        turn = number % len(LOOPS)
        for mode in LOOPS[turn:] + LOOPS[:turn]:
            loops[mode] = loop_round(args, work, mode)
        rounds.append({"throughput": throughput_round(args, work, number), "loops": loops})
    if env.is_main:
        args.worker_out.write_text(json.dumps(rounds))
    st.barrier()
    if env.is_main:
        shutil.rmtree(work, ignore_errors=True)
    st.shutdown()


# ---- the driver: one torchrun per number of ranks, then the summary ---------------------


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    median = statistics.median
    rates: dict[str, dict[str, list[float]]] = {"save": {}, "load": {}}
    for one in rounds:
        sizes = one["throughput"]["bytes"]
        for kind, times in one["throughput"]["seconds"].items():
            for name, seconds in times.items():
                size = sizes[_SIZE_OF.get(name, name)]
                rates[kind].setdefault(name, []).append(size / 1e6 / seconds)
    # Older result files have no "least" or "write only" loop.
    modes = [mode for mode in LOOPS if mode in rounds[0]["loops"]]
    stalls: dict[str, list[float]] = {mode: [] for mode in modes}
    cpu: dict[str, list[float]] = {mode: [] for mode in modes}
    blocked: dict[str, list[float]] = {mode: [] for mode in modes if mode != "synchronous"}
    for one in rounds:
        for mode in modes:
            loop = one["loops"][mode]
            # Only the steps the save overlapped: the noise of the other steps stays out.
            steps = overlapped(loop)
            baseline = own_step_time(loop["intervals_s"], steps)
            extra = sum(loop["intervals_s"][i] - baseline for i in steps)
            stalls[mode].append(extra + loop["final_wait_s"])
            cpu_per_step = own_step_time(loop["cpu_s"], steps)
            extra_cpu = sum(loop["cpu_s"][i] - cpu_per_step for i in steps)
            cpu[mode].append(extra_cpu + loop["final_cpu_s"])
            if mode in blocked:
                blocked[mode].append(loop["intervals_s"][0] - baseline + loop["waited_for_copy_s"])
    mb_per_s = {kind: {name: median(v) for name, v in by.items()} for kind, by in rates.items()}
    sync_stall = median(stalls["synchronous"])
    least = (
        {
            "least_slowdown_s": median(stalls["least"]),
            "least_blocked_s": median(blocked["least"]),
            "least_slowdown_vs_sync": median(stalls["least"]) / sync_stall,
            "async_slowdown_vs_least": median(stalls["asynchronous"]) / median(stalls["least"]),
        }
        if "least" in modes
        else {}
    )
    if "write only" in modes:
        least["write_only_slowdown_s"] = median(stalls["write only"])
        least["write_only_slowdown_vs_sync"] = median(stalls["write only"]) / sync_stall
    return {
        "mb_per_s": mb_per_s,
        "mb_per_s_each_round": rates,
        "save_vs_plain_write": mb_per_s["save"]["scaletrain"] / mb_per_s["save"]["plain write"],
        "save_vs_plain_dcp": mb_per_s["save"]["scaletrain"] / mb_per_s["save"]["plain DCP"],
        "load_vs_plain_read": mb_per_s["load"]["scaletrain"] / mb_per_s["load"]["plain read"],
        "load_vs_plain_dcp": mb_per_s["load"]["scaletrain"] / mb_per_s["load"]["plain DCP"],
        "sync_stall_s": sync_stall,
        "async_slowdown_s": median(stalls["asynchronous"]),
        "async_blocked_s": median(blocked["asynchronous"]),
        "async_slowdown_vs_sync": median(stalls["asynchronous"]) / sync_stall,
        "async_blocked_vs_sync": median(blocked["asynchronous"]) / sync_stall,
        **least,
        "stalls_each_round_s": stalls,
        # CPU seconds a save added to rank 0's process (the writer thread's included): what
        # an asynchronous save takes from training when training uses every core.
        "save_cpu_s": {mode: median(values) for mode, values in cpu.items()},
        "save_cpu_each_round_s": cpu,
    }


def state_bytes(args: argparse.Namespace) -> int:
    """Weights, biases and Adam's two moments, in float32."""
    return 3 * args.layers * (args.width * args.width + args.width) * 4


def driver(args: argparse.Namespace) -> None:
    import torch

    import scaletrain

    results: dict[str, Any] = {}
    for ranks in args.ranks:
        out = Path(tempfile.mkstemp(suffix=".json")[1])
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={ranks}",
            __file__,
            *sys.argv[1:],
            f"--worker-out={out}",
        ]
        environ = {**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // ranks))}
        started = time.perf_counter()
        subprocess.run(command, check=True, env=environ, timeout=3600)
        rounds = json.loads(out.read_text(encoding="utf-8"))
        out.unlink()
        results[str(ranks)] = {"summary": summarize(rounds), "rounds": rounds}
        print(f"{ranks} rank(s): {time.perf_counter() - started:.0f} s", file=sys.stderr)
    load = os.getloadavg()
    record = {
        "time": datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": {
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "load_average_1_5_15": load,
            "torch": torch.__version__,
            "scaletrain": scaletrain.__version__,
        },
        "settings": {**vars(args), "state_mb": state_bytes(args) / 1e6},
        "by_ranks": results,
    }
    path = args.out
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(record, indent=1, default=str) + "\n")
    show(record, path)


def show(record: dict[str, Any], path: Path) -> None:
    machine, settings = record["machine"], record["settings"]
    print(f"state {settings['state_mb']:,.0f} MB; load average {machine['load_average_1_5_15']}")
    print(
        "ranks  save MB/s: plain / DCP / scaletrain   load MB/s: plain / DCP / scaletrain   "
        "sync stall  async slowdown (blocked)  least async slowdown  its write alone"
    )
    for ranks, result in record["by_ranks"].items():
        summary = result["summary"]
        save, load = summary["mb_per_s"]["save"], summary["mb_per_s"]["load"]
        print(
            f"{ranks:>5}  {save['plain write']:>10,.0f} / {save['plain DCP']:,.0f} / "
            f"{save['scaletrain']:,.0f} ({summary['save_vs_plain_write']:.2f}, "
            f"{summary['save_vs_plain_dcp']:.2f})   {load['plain read']:>6,.0f} / "
            f"{load['plain DCP']:,.0f} / {load['scaletrain']:,.0f} "
            f"({summary['load_vs_plain_read']:.2f}, {summary['load_vs_plain_dcp']:.2f})   "
            f"{summary['sync_stall_s']:.2f} s  {summary['async_slowdown_s']:.2f} s "
            f"({summary['async_slowdown_vs_sync']:.2f}) ({summary['async_blocked_s']:.3f} s, "
            f"{summary['async_blocked_vs_sync']:.3f})  {summary['least_slowdown_s']:.2f} s "
            f"({summary['least_slowdown_vs_sync']:.2f})  "
            f"{summary.get('write_only_slowdown_s', float('nan')):.2f} s"
        )
    print(f"results: {path}")


def main() -> None:
    args = parse_args()
    if args.worker_out is not None:
        worker(args)
    else:
        driver(args)


if __name__ == "__main__":
    main()
