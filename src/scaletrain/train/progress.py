"""Visible progress of a training run: steps, loss, samples/s and time left, from rank 0.

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

from scaletrain.core.progress_line import format_progress_line, format_value
from scaletrain.core.run_folder import RunFolder
from scaletrain.runtime.process_group import current_env
from scaletrain.train.metrics import Number, mean_over_ranks
from scaletrain.train.ranks import is_main_process, print0

# About this many progress lines per run by default: enough to see a trend, few enough to read.
_LINES_PER_RUN = 20


class Progress:
    """Report training progress every `every` steps and keep a metrics file in the run folder."""

    def __init__(
        self,
        total_steps: int,
        *,
        samples_per_step: int,
        every: int | None = None,
        start_step: int = 0,
        run_folder: RunFolder | None = None,
    ) -> None:
        self.total_steps = total_steps
        self.samples_per_step = samples_per_step
        self.every = every or max(1, total_steps // _LINES_PER_RUN)
        self.step = start_step
        self._start_step = start_step
        self._folder = run_folder or current_env().run_folder
        # Running sums since the last report: tensors stay where they live (no GPU sync per
        # step) and are added in place; plain numbers stay Python floats.
        self._sums: dict[str, torch.Tensor | float] = {}
        self._count = 0
        self._started = time.perf_counter()
        self._interval_started = self._started
        self._interval_steps = 0
        self._epoch: int | None = None

    def update(self, *, epoch: int | None = None, **metrics: Number) -> None:
        """Record one finished optimizer step; every rank must call this."""
        self.step += 1
        self._interval_steps += 1
        self._epoch = epoch if epoch is not None else self._epoch
        for name, value in metrics.items():
            total = self._sums.get(name)
            if isinstance(value, torch.Tensor):
                if isinstance(total, torch.Tensor):
                    total.add_(value.detach())
                else:  # the first tensor since the last report; float64: a sum of many steps
                    self._sums[name] = value.detach().to(torch.float64, copy=True).add_(total or 0)
            else:
                self._sums[name] = (total or 0.0) + value
        self._count += 1
        if self.step % self.every == 0 or self.step == self.total_steps:
            self._report()

    def _report(self) -> None:
        now = time.perf_counter()
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
            "samples_per_s": self.samples_per_step * self._interval_steps / interval,
            "elapsed_s": elapsed,
            "eta_s": elapsed / done * (self.total_steps - self.step) if done else 0.0,
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
            "samples_per_s": self.samples_per_step * done / max(elapsed, 1e-9),
            **mean_over_ranks(results),
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

    def _append(self, filename: str, record: dict[str, Any]) -> None:
        if self._folder is not None:
            path = self._metrics_file(filename)
            with path.open("a") as file:
                file.write(json.dumps(record) + "\n")

    def _write(self, filename: str, record: dict[str, Any]) -> None:
        if self._folder is not None:
            self._metrics_file(filename).write_text(json.dumps(record, indent=2) + "\n")

    def _metrics_file(self, filename: str) -> Path:
        assert self._folder is not None
        self._folder.metrics.mkdir(parents=True, exist_ok=True)
        return self._folder.metrics / filename
