"""Benchmark: what the hang watchdog costs a training loop. The README's loop (Checkpointer
and Progress over a tiny MLP, a step of a few milliseconds so that any cost per step shows),
started as users start it, `scaletrain run --nproc 2`, with the watchdog on (the default:
each rank notes its step in memory and a thread writes its heartbeat every few seconds; the
CLI reads them) and off (`--hang-limit 0`: no heartbeat, no watchdog).

    python benchmarks/heartbeat_overhead.py [--rounds 4] [--steps 600]

Each round launches every setting once, in an order rotated from round to round, so that
drift of the shared machine hits all alike; each launch reports the median time of its steps
after a warm-up; the result is the median over launches and its ratio to "off". As the
launches' spread on a shared machine hides microseconds, each launch also times what the
loop itself pays per step, the heartbeat's `note_step`, in a tight loop after training.
Results: benchmarks/results/heartbeat_overhead.json.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
from common import save, spread  # noqa: E402

BATCH_PER_RANK, FEATURES, HIDDEN, CLASSES, SAMPLES = 32, 32, 64, 10, 32 * 16 * 64
WARMUP_STEPS = 100
# With the watchdog on: the default limit (heartbeats every 10 s) and a short one (every 0.5 s).
LIMITS = {"on (limit 300 s)": "300", "on (limit 10 s)": "10", "off": "0"}


def worker(out: Path, steps: int) -> None:
    import torch
    from torch import nn
    from torch.utils.data import TensorDataset

    import scaletrain as st

    env = st.init()
    global_batch = BATCH_PER_RANK * env.world_size
    generator = torch.Generator().manual_seed(0)
    inputs = torch.randn(SAMPLES, FEATURES, generator=generator)
    data = TensorDataset(inputs, torch.randint(0, CLASSES, (SAMPLES,), generator=generator))
    torch.manual_seed(0)
    net = st.wrap(nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.ReLU(), nn.Linear(HIDDEN, CLASSES)))
    optimizer = torch.optim.SGD(net.parameters(), lr=0.01)
    loader = st.loader(data, global_batch_size=global_batch)
    # No timed saves: a save would be the same with and without the watchdog.
    ckpt = st.Checkpointer(model=net, optimizer=optimizer, every_minutes=None)
    progress = st.Progress(10**9, samples_per_step=global_batch, every=50)
    times: list[float] = []
    started = time.perf_counter()
    for epoch in ckpt.epochs(10**9):
        for batch in ckpt.batches(loader):
            x, y = batch
            loss = nn.functional.cross_entropy(net(x), y)
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            optimizer.step()
            progress.update(epoch=epoch, loss=loss)
            now = time.perf_counter()
            times.append(now - started)
            started = now
            if len(times) == WARMUP_STEPS + steps:
                break
        if len(times) == WARMUP_STEPS + steps:
            break
    if env.is_main:
        out.write_text(
            json.dumps(
                {"step_s": statistics.median(times[WARMUP_STEPS:]), "note_step_s": note_step_cost()}
            ),
            encoding="utf-8",
        )
    st.shutdown()


def note_step_cost(calls: int = 200_000) -> float:
    """Seconds per call of what every step of the loop adds for the watchdog (a no-op when it
    is off)."""
    from scaletrain.runtime import heartbeat

    started = time.perf_counter()
    for step in range(10**9, 10**9 + calls):
        heartbeat.note_step(step)
    return (time.perf_counter() - started) / calls


def launch(limit: str, steps: int) -> dict[str, float]:
    """One `scaletrain run --nproc 2` of this file: rank 0's median step time, note_step's cost."""
    with tempfile.TemporaryDirectory(prefix="heartbeat-overhead-") as folder:
        out = Path(folder) / "median.json"
        command = [
            str(Path(sys.executable).with_name("scaletrain")), "run", "--nproc", "2",
            "--name", "bench", "--runs-dir", str(Path(folder) / "runs"),
            "--max-restarts", "0", "--hang-limit", limit,
            str(Path(__file__).resolve()), "--worker", f"--out={out}", f"--steps={steps}",
        ]  # fmt: skip
        environ = {**os.environ, "OMP_NUM_THREADS": "1"}
        environ = {name: value for name, value in environ.items() if "SCALETRAIN" not in name}
        subprocess.run(command, check=True, env=environ, timeout=1800, capture_output=True)
        measured: dict[str, float] = json.loads(out.read_text())
        return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--steps", type=int, default=600, help="timed steps per launch")
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--out", type=Path, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.worker:
        worker(options.out, options.steps)
        return
    medians: dict[str, list[float]] = {name: [] for name in LIMITS}
    note_step: dict[str, list[float]] = {name: [] for name in LIMITS}
    names = list(LIMITS)
    for number in range(options.rounds):
        for name in names[number % len(names) :] + names[: number % len(names)]:
            measured = launch(LIMITS[name], options.steps)
            medians[name].append(measured["step_s"])
            note_step[name].append(measured["note_step_s"])
            print(
                f"{name}: {measured['step_s'] * 1e3:.3f} ms per step, note_step "
                f"{measured['note_step_s'] * 1e6:.2f} us",
                file=sys.stderr,
                flush=True,
            )
    off = statistics.median(medians["off"])
    record = {
        "benchmark": "heartbeat_overhead",
        "machine": f"{os.cpu_count()} cores, 2 ranks, gloo on CPU, OMP_NUM_THREADS=1",
        "load_average_at_end": os.getloadavg()[0],
        "timed_steps_per_launch": options.steps,
        "step_time_s": {name: spread(values) for name, values in medians.items()},
        "ratio_to_off": {name: statistics.median(v) / off for name, v in medians.items()},
        "note_step_us": {name: statistics.median(v) * 1e6 for name, v in note_step.items()},
    }
    print(json.dumps(record["ratio_to_off"]), file=sys.stderr)
    print(f"saved {save('heartbeat_overhead', record)}", file=sys.stderr)


if __name__ == "__main__":
    main()
