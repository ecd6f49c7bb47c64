"""What a checkpoint costs, at 1, 2 and 4 ranks, in one run (interleaved rounds, medians):

- save and load throughput of scaletrain's Checkpointer on each storage ("dcp", the
  default, and the opt-in "direct") next to a plain fsynced write and read of the same bytes
  (each rank its share, in parallel) and next to plain torch.distributed.checkpoint (DCP)
  save/load of the same state with default options; each figure divides the bytes of the
  one checkpoint a round saved and loaded by its time;
- for a training loop: how long a synchronous save stalls it, and for an asynchronous save
  (plain DCP's `async_save` and scaletrain's on each storage) how long the loop was blocked
  (the step the save started after, plus any wait of the next optimizer step for a
  background copy of its state) and its total slowdown (the extra time, over the same
  loop's median step once the save is over, of every step the background write
  overlapped, plus any wait for it at the end); and the CPU time each save added to rank 0's
  process over those steps, the writer threads' included.

    .venv/bin/python benchmarks/checkpoint_cost.py             # 201 MB of state, ~40 min
    # 2,400 small tensors (15 MB): what a save costs per tensor
    .venv/bin/python benchmarks/checkpoint_cost.py --layers 300 --width 64 --ranks 1 2 \
        --rounds 4 --out benchmarks/results/checkpoint_cost_many_tensors.json

Loads read from the disk, not from the page cache: every file is dropped from the cache
(posix_fadvise DONTNEED, after fsync) before each load and each plain read. Each rank is one
torchrun process; a measurement starts together on all ranks and ends with the slowest.
Plain DCP's asynchronous save gets a gloo group of its own, as DCP advises (its collectives
run in a thread beside training's). Writes benchmarks/results/checkpoint_cost.json
(benchmarks/run_all.py summarizes it), or the file --out names.
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

RESULTS = Path(__file__).resolve().parent / "results"
STORAGES = ("dcp", "direct")
SCALETRAIN = tuple(f"scaletrain {storage}" for storage in STORAGES)
SAVES = ("plain write", "plain DCP", *SCALETRAIN)
LOADS = ("plain read", "plain DCP", *SCALETRAIN)
# Each save in a training loop, synchronous and asynchronous: (who, how).
LOOPS = tuple(f"{who} {how}" for who in ("plain DCP", *SCALETRAIN) for how in ("sync", "async"))
# The plain write and read move the same bytes as the state, split over the ranks.
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


class PlainDcp:
    """Plain DCP's save, load and async_save of a model and optimizer, default options."""

    def __init__(self, model: Any, optimizer: Any, root: Path, group: Any = None) -> None:
        self.model, self.optimizer, self.root, self.group = model, optimizer, root, group
        self._saving: Any = None
        self.waited_for_copy_s = 0.0  # async_save copies the whole state before it returns

    def state(self) -> dict[str, Any]:
        from torch.distributed.checkpoint.state_dict import get_state_dict

        model_state, optimizer_state = get_state_dict(self.model, self.optimizer)
        return {"model": model_state, "optimizer": optimizer_state}

    def save(self, step: int, *, asynchronous: bool = False) -> None:
        import torch.distributed.checkpoint as dcp

        self.wait()
        folder = self.folder(step)
        if asynchronous:
            self._saving = dcp.async_save(
                self.state(), checkpoint_id=folder, process_group=self.group
            )
        else:
            dcp.save(self.state(), checkpoint_id=folder)

    def folder(self, step: int) -> Path:
        return self.root / f"step-{step}"

    def load(self, step: int) -> None:
        import torch.distributed.checkpoint as dcp
        from torch.distributed.checkpoint.state_dict import set_state_dict

        state = self.state()
        dcp.load(state, checkpoint_id=self.folder(step))
        set_state_dict(
            self.model,
            self.optimizer,
            model_state_dict=state["model"],
            optim_state_dict=state["optimizer"],
        )

    @property
    def in_flight(self) -> bool:
        return self._saving is not None and not self._saving.done()

    def wait(self) -> None:
        saving, self._saving = self._saving, None
        if saving is not None:
            saving.result()


def throughput_round(args: argparse.Namespace, work: Path, number: int) -> dict[str, Any]:
    """One save and one load of each kind, in an order that turns each round."""
    import scaletrain as st
    from scaletrain.checkpoint.layout import CheckpointStore

    env = st.current_env()
    model, optimizer = build(args)
    plain_dcp = PlainDcp(model, optimizer, work / "dcp")
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

    run_dirs = {name: work / name.replace(" ", "-") for name in SCALETRAIN}
    checkpointers = {
        name: st.Checkpointer(
            model=model, optimizer=optimizer, every_minutes=None, run_dir=run_dirs[name],
            storage=storage,
        )
        for name, storage in zip(SCALETRAIN, STORAGES, strict=True)
    }  # fmt: skip

    def scaletrain_save(name: str) -> Callable[[], None]:
        def save() -> None:
            ckpt = checkpointers[name]
            ckpt.step += 1
            ckpt.save(reason="benchmark")

        return save

    def scaletrain_load(name: str, storage: str) -> Callable[[], None]:
        def load() -> None:
            st.Checkpointer(
                model=model, optimizer=optimizer, every_minutes=None, run_dir=run_dirs[name],
                storage=storage,
            )  # fmt: skip

        return load

    saves = {"plain write": plain_write, "plain DCP": lambda: plain_dcp.save(number)}
    loads = {"plain read": plain_read, "plain DCP": lambda: plain_dcp.load(number)}
    for name, storage in zip(SCALETRAIN, STORAGES, strict=True):
        saves[name] = scaletrain_save(name)
        loads[name] = scaletrain_load(name, storage)
    seconds: dict[str, dict[str, float]] = {"save": {}, "load": {}}
    turn = number % len(SAVES)
    for name in SAVES[turn:] + SAVES[:turn]:
        seconds["save"][name] = timed(saves[name])
    # The checkpoint this round saved, which its load reads: the runs keep the newest three.
    newest = {
        name: CheckpointStore(run_dirs[name] / "checkpoints").complete()[0] for name in SCALETRAIN
    }
    folders = {"plain read": plain, "plain DCP": plain_dcp.folder(number), **newest}
    for name in LOADS[turn:] + LOADS[:turn]:
        if env.is_main:
            target = folders[name]
            drop_from_cache(target.parent if target.is_file() else target)
        seconds["load"][name] = timed(loads[name])
    size = {name: folder_bytes(folders[name]) for name in ("plain DCP", *SCALETRAIN)}
    return {"seconds": seconds, "bytes": size | {"plain": share * env.world_size}}


def loop_round(args: argparse.Namespace, work: Path, mode: str) -> dict[str, Any]:
    """Train `window` steps after one save of `mode` (who saves, sync or async), and on
    until the loop has run SETTLED_STEPS without a write in flight."""
    import torch

    import scaletrain as st
    from scaletrain.runtime.process_group import new_group

    model, optimizer = build(args)
    who, how = mode.rsplit(" ", 1)
    asynchronous = how == "async"
    folder = work / f"loop-{mode.replace(' ', '-')}-{time.monotonic_ns()}"
    writer: Any
    if who == "plain DCP":
        # A group of its own for DCP's collectives in its writer thread (gloo: CPU tensors).
        group = (
            new_group(backend="gloo") if asynchronous and st.current_env().world_size > 1 else None
        )
        writer = PlainDcp(model, optimizer, folder, group)

        def save(step: int, reason: str) -> None:
            writer.save(step, asynchronous=asynchronous)
    else:
        ckpt = st.Checkpointer(
            model=model,
            optimizer=optimizer,
            every_minutes=None,
            keep=1,
            asynchronous=asynchronous,
            storage=who.removeprefix("scaletrain "),
            run_dir=folder,
        )
        writer = ckpt._writer

        def save(step: int, reason: str) -> None:
            ckpt.step = step
            ckpt._save(reason, blocking=not asynchronous)

    batch = torch.randn(args.batch, args.width)
    warmup = 3
    arrivals, cpu_times, in_flight = [], [], []
    waited_before = 0.0
    step, settled = 0, 0
    # At least `window` steps after the save, on while a background write is in flight on
    # any rank (the slowdown is what the steps it overlaps lose, not a wait for it), and
    # SETTLED_STEPS more after that, for the loop's own step time. Every mode asks (a tiny
    # all_reduce per step), so that the steps stay comparable.
    while (step < warmup + args.window or settled < SETTLED_STEPS) and step < warmup + MAX_STEPS:
        arrivals.append(time.perf_counter())
        cpu_times.append(time.process_time())  # this rank's every thread: the writers' too
        model(batch).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        if step == 0:
            # A first save, not measured: a run's saves after its first reuse the staging
            # memory (and the folders exist), and that steady state is what is measured.
            save(1, "benchmark warm-up")
            writer.wait()
            waited_before = writer.waited_for_copy_s
        if step == warmup - 1:
            # One save at a chosen step boundary, as the loop's own boundary would start it.
            save(step + 1, "benchmark")
        step += 1
        writing = st.total(float(asynchronous and writer.in_flight)) > 0
        in_flight.append(writing)
        settled = 0 if writing else settled + 1
    arrivals.append(time.perf_counter())
    cpu_times.append(time.process_time())
    started = time.perf_counter()
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


def loop_costs(rounds: list[dict[str, Any]], mode: str) -> dict[str, list[float]]:
    """Per round: what one save of `mode` cost the loop (stall or slowdown, s), how long it
    blocked the loop (s), and the CPU time it added to rank 0's process (s)."""
    costs: dict[str, list[float]] = {"stall": [], "blocked": [], "cpu": []}
    for one in rounds:
        loop = one["loops"][mode]
        # Only the steps the save overlapped: the noise of the other steps stays out.
        steps = overlapped(loop)
        baseline = own_step_time(loop["intervals_s"], steps)
        extra = sum(loop["intervals_s"][i] - baseline for i in steps)
        costs["stall"].append(extra + loop["final_wait_s"])
        costs["blocked"].append(loop["intervals_s"][0] - baseline + loop["waited_for_copy_s"])
        cpu_per_step = own_step_time(loop["cpu_s"], steps)
        extra_cpu = sum(loop["cpu_s"][i] - cpu_per_step for i in steps)
        costs["cpu"].append(extra_cpu + loop["final_cpu_s"])
    return costs


def summarize(rounds: list[dict[str, Any]]) -> dict[str, Any]:
    median = statistics.median
    rates: dict[str, dict[str, list[float]]] = {"save": {}, "load": {}}
    for one in rounds:
        sizes = one["throughput"]["bytes"]
        for kind, times in one["throughput"]["seconds"].items():
            for name, seconds in times.items():
                size = sizes[_SIZE_OF.get(name, name)]
                rates[kind].setdefault(name, []).append(size / 1e6 / seconds)
    mb_per_s = {kind: {name: median(v) for name, v in by.items()} for kind, by in rates.items()}
    costs = {mode: loop_costs(rounds, mode) for mode in LOOPS}
    loops = {
        mode: {f"{name}_s": median(values) for name, values in by.items()}
        for mode, by in costs.items()
    }
    for who in ("plain DCP", *SCALETRAIN):
        sync_stall = loops[f"{who} sync"]["stall_s"]
        asynchronous = loops[f"{who} async"]
        # An asynchronous save's slowdown of the loop against the same saver's synchronous
        # stall (the target: at most 0.25), and the time it blocked the loop against it.
        asynchronous["slowdown_vs_sync"] = asynchronous["stall_s"] / sync_stall
        asynchronous["blocked_vs_sync"] = asynchronous["blocked_s"] / sync_stall
    ratios = {
        f"{kind}_vs_{base.replace(' ', '_')}": {
            name: mb_per_s[kind][name] / mb_per_s[kind][base] for name in SCALETRAIN
        }
        for kind, bases in (
            ("save", ("plain write", "plain DCP")),
            ("load", ("plain read", "plain DCP")),
        )
        for base in bases
    }
    return {
        "mb_per_s": mb_per_s,
        "mb_per_s_each_round": rates,
        **ratios,
        "loops": loops,
        "loops_each_round": costs,
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
        # Without --log-dir torchrun leaves a torchelastic_* folder in $TMPDIR per run.
        logs = tempfile.TemporaryDirectory(prefix="torchrun-logs-")
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={ranks}",
            f"--log-dir={logs.name}",
            __file__,
            *sys.argv[1:],
            f"--worker-out={out}",
        ]
        environ = {**os.environ, "OMP_NUM_THREADS": str(max(1, (os.cpu_count() or 1) // ranks))}
        started = time.perf_counter()
        load_before = os.getloadavg()
        with logs:
            subprocess.run(command, check=True, env=environ, timeout=3 * 3600)
        rounds = json.loads(out.read_text(encoding="utf-8"))
        out.unlink()
        results[str(ranks)] = {
            "summary": summarize(rounds),
            # Other work on the machine shows as a load above what this run puts on it.
            "load_average_1_5_15_before": load_before,
            "load_average_1_5_15_after": os.getloadavg(),
            "rounds": rounds,
        }
        print(f"{ranks} rank(s): {time.perf_counter() - started:.0f} s", file=sys.stderr)
    record = {
        "time": datetime.now().astimezone().isoformat(timespec="seconds"),
        "machine": {
            "host": platform.node(),
            "cpus": os.cpu_count(),
            "load_average_1_5_15": os.getloadavg(),
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
    settings = record["settings"]
    print(f"state {settings['state_mb']:,.0f} MB, {settings['rounds']} rounds; MB/s, medians")
    for ranks, result in record["by_ranks"].items():
        summary = result["summary"]
        load = result["load_average_1_5_15_before"][0]
        print(f"{ranks} rank(s), load average before {load:.1f}:")
        for kind, names in (("save", SAVES), ("load", LOADS)):
            rates = summary["mb_per_s"][kind]
            text = ", ".join(f"{name} {rates[name]:,.0f}" for name in names)
            print(f"  {kind}: {text}")
        for who in ("plain DCP", *SCALETRAIN):
            sync, asynchronous = summary["loops"][f"{who} sync"], summary["loops"][f"{who} async"]
            print(
                f"  {who}: sync stall {sync['stall_s']:.3f} s, async slowdown "
                f"{asynchronous['stall_s']:.3f} s ({asynchronous['slowdown_vs_sync']:.2f} of "
                f"sync), blocked {asynchronous['blocked_s']:.3f} s"
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
