"""Visible progress of a training run: steps, loss, samples/s (tokens/s for language models)
and time left, from rank 0; the summary adds peak memory per rank and model FLOPs utilisation.

Every rank calls `update` each step; values are accumulated where they live (no GPU sync per
step) and reduced over ranks once per report, so the printed loss is the mean over all
ranks and all steps since the last line.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from scaletrain.core.progress_line import format_progress_line, format_value
from scaletrain.core.run_folder import RunFolder
from scaletrain.core.toml_text import TomlError, parse_toml
from scaletrain.runtime import heartbeat
from scaletrain.runtime.process_group import current_env
from scaletrain.train.measures import peak_memory_per_rank
from scaletrain.train.metrics import Number, mean_over_ranks
from scaletrain.train.ranks import is_main_process, print0

# About this many progress lines per run by default: enough to see a trend, few enough to read.
_LINES_PER_RUN = 20

# Tensor values are added up in their own precision (float32 at least), this many steps at a
# time, and then into a float64 total: adding a float32 value into a float64 sum in place took
# 8.5 µs inside a 2-rank training loop, a float32 add 0.9 µs (docs/checkpoints.md).
_VALUES_PER_SUM = 256

# The field of a generated job's plan.toml that carries the cluster profile's GPU peak.
PEAK_TFLOPS_FIELD = "gpu_peak_tflops"


def planned_peak_tflops(folder: RunFolder | None) -> float | None:
    """The GPU's peak TFLOPS from the run's plan.toml (written by `scaletrain submit` from the
    cluster profile), or None for local runs and profiles that do not know it."""
    if folder is None or not folder.plan.is_file():
        return None
    try:
        value = parse_toml(folder.plan.read_text(encoding="utf-8")).get(PEAK_TFLOPS_FIELD)
    except (OSError, TomlError):
        return None
    return float(value) if isinstance(value, int | float) else None


class Progress:
    """Report training progress every `every` steps and keep a metrics file in the run folder.

    `tokens_per_step` (language models: global batch × sequence length) adds tokens/s;
    `flops_per_step` (e.g. st.transformer_flops_per_token(...) × tokens_per_step) adds the
    achieved TFLOPS per GPU and, when the GPU's peak is known (`peak_tflops_per_gpu`, or the
    cluster profile through a generated job's plan.toml), the model FLOPs utilisation.
    """

    def __init__(
        self,
        total_steps: int,
        *,
        samples_per_step: int,
        tokens_per_step: int | None = None,
        flops_per_step: float | None = None,
        peak_tflops_per_gpu: float | None = None,
        every: int | None = None,
        start_step: int = 0,
        run_folder: RunFolder | None = None,
    ) -> None:
        self.total_steps = total_steps
        self.samples_per_step = samples_per_step
        self.tokens_per_step = tokens_per_step
        self.flops_per_step = flops_per_step
        self.every = every or max(1, total_steps // _LINES_PER_RUN)
        self.step = start_step
        self._start_step = start_step
        self._folder = run_folder or current_env().run_folder
        self.peak_tflops_per_gpu = peak_tflops_per_gpu or planned_peak_tflops(self._folder)
        # Running sums since the last report. Tensors stay where they live (no GPU sync per
        # step): partial sums in the values' own precision, moved into float64 totals every
        # _VALUES_PER_SUM steps and at each report; plain numbers stay Python floats.
        self._sums: dict[str, torch.Tensor | float] = {}
        self._partial: dict[str, torch.Tensor] = {}
        self._count = 0
        self._started = time.perf_counter()
        self._interval_started = self._started
        self._interval_steps = 0
        self._epoch: int | None = None

    def update(self, *, epoch: int | None = None, **metrics: Number) -> None:
        """Record one finished optimizer step; every rank must call this."""
        self.step += 1
        heartbeat.note_step(self.step)  # for the hang watchdog: memory only
        self._interval_steps += 1
        if epoch is not None:
            self._epoch = epoch
        for name, value in metrics.items():
            if isinstance(value, torch.Tensor):
                self._add_tensor(name, value)
            else:
                self._sums[name] = self._sums.get(name, 0.0) + value
        self._count += 1
        if self.step % self.every == 0 or self.step == self.total_steps:
            self._report()
        elif self._count % _VALUES_PER_SUM == 0:
            self._sum_up()

    def _add_tensor(self, name: str, value: torch.Tensor) -> None:
        """Add `value` now (a caller may change it in place later) to a partial sum in its
        own precision (float32 at least)."""
        partial = self._partial.get(name)
        if partial is None:
            dtype = torch.promote_types(value.dtype, torch.float32)
            self._partial[name] = value.detach().to(dtype, copy=True)
        else:
            partial.add_(value.detach())  # detached: no graph through the sum

    def _sum_up(self) -> None:
        """Move the partial sums into their float64 totals."""
        for name, partial in self._partial.items():
            self._sums[name] = partial.to(torch.float64).add_(self._sums.get(name, 0.0))
        self._partial = {}

    def _report(self) -> None:
        now = time.perf_counter()
        self._sum_up()
        averages = mean_over_ranks(
            {name: total / self._count for name, total in self._sums.items()}
        )
        interval = max(now - self._interval_started, 1e-9)
        elapsed = now - self._started
        done = self.step - self._start_step
        record: dict[str, Any] = {
            "step": self.step,
            "total_steps": self.total_steps,
            "epoch": self._epoch,
            **averages,
            **self._rates(self._interval_steps, interval),
            "elapsed_s": elapsed,
            "eta_s": elapsed / done * (self.total_steps - self.step) if done else 0.0,
            # When the step ended (seconds since the epoch): `scaletrain cost` places each
            # step within Slurm's runs of the job.
            "time": round(time.time(), 3),
        }
        self._sums, self._count = {}, 0
        self._interval_started, self._interval_steps = now, 0
        if not is_main_process():
            return
        print0(format_progress_line(record))
        self._append("train.jsonl", record)

    def finish(self, **results: Number) -> dict[str, Any]:
        """Print and save the run's summary: steps, time, throughput and `results`
        (averaged over ranks, so pass values that are already global, such as accuracy).

        A run that trained no step now (it had finished already) keeps the summary it has:
        rank 0 returns that one and writes nothing.
        """
        elapsed = time.perf_counter() - self._started
        done = self.step - self._start_step
        summary: dict[str, Any] = {
            "steps": self.step,
            "elapsed_s": elapsed,
            **self._rates(done, max(elapsed, 1e-9)),
            **self._flops(done, max(elapsed, 1e-9)),
            **mean_over_ranks(results),
            "peak_memory_gb": [
                round(value / 1e9, 3) for value in peak_memory_per_rank(current_env().device)
            ],
        }
        if not is_main_process():
            return summary
        # Decided after the collective above, so that every rank takes part in it.
        saved = self._saved_summary() if self.step == self._start_step > 0 else None
        if saved is not None:
            print0(f"scaletrain: nothing trained; kept the summary of step {self.step}")
            return saved
        shown = ", ".join(f"{name} {format_value(v)}" for name, v in summary.items())
        print0(f"finished: {shown}")
        self._write("summary.json", summary)
        return summary

    def _saved_summary(self) -> dict[str, Any] | None:
        if self._folder is None:
            return None
        path = self._folder.metrics / "summary.json"
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None  # none yet, or unreadable: write a new one
        return saved if isinstance(saved, dict) else None

    def _rates(self, steps: int, seconds: float) -> dict[str, float]:
        rates = {"samples_per_s": self.samples_per_step * steps / seconds}
        if self.tokens_per_step:
            rates["tokens_per_s"] = self.tokens_per_step * steps / seconds
        return rates

    def _flops(self, steps: int, seconds: float) -> dict[str, float]:
        """Achieved model TFLOPS per GPU and, with a known peak, their share of it (MFU)."""
        if not self.flops_per_step:
            return {}
        world_size = dist.get_world_size() if dist.is_initialized() else 1
        per_gpu = self.flops_per_step * steps / seconds / world_size / 1e12
        flops: dict[str, float] = {"tflops_per_gpu": per_gpu}
        if self.peak_tflops_per_gpu:
            flops["mfu"] = per_gpu / self.peak_tflops_per_gpu
        return flops

    def _append(self, filename: str, record: dict[str, Any]) -> None:
        if self._folder is not None:
            path = self._metrics_file(filename)
            with path.open("a", encoding="utf-8") as file:
                file.write(json.dumps(record) + "\n")

    def _write(self, filename: str, record: dict[str, Any]) -> None:
        if self._folder is not None:
            self._metrics_file(filename).write_text(
                json.dumps(record, indent=2) + "\n", encoding="utf-8"
            )

    def _metrics_file(self, filename: str) -> Path:
        assert self._folder is not None
        self._folder.metrics.mkdir(parents=True, exist_ok=True)
        return self._folder.metrics / filename
