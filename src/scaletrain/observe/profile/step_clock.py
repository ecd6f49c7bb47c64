"""Step times of any training script, from torch's global optimizer-step hook.

Used by the instrumented entry (`scaletrain scale`): every rank notes when each optimizer
step ends, writes metrics/steps-rank-<R>.json, and with a step limit all ranks end the
script together after that many steps (their steps are in lockstep under DDP).
"""

from __future__ import annotations

import atexit
import json
import socket
import time
from pathlib import Path
from typing import Any

import torch.distributed as dist
from torch.optim.optimizer import register_optimizer_step_post_hook

from scaletrain.observe.profile.step_clock_files import steps_file


class StepClock:
    """Times every optimizer step of this process; optionally ends it after `stop_after`."""

    def __init__(self, metrics: Path, rank: int, world_size: int, stop_after: int | None) -> None:
        self.path = steps_file(metrics, rank)
        self.record: dict[str, Any] = {
            "rank": rank,
            "world_size": world_size,
            "host": socket.gethostname(),
            "started": time.time(),
            "step_ends": [],
        }
        self._stop_after = stop_after
        self._hook = register_optimizer_step_post_hook(self._on_step)
        atexit.register(self.save)

    def _on_step(self, *_: Any) -> None:
        ends: list[float] = self.record["step_ends"]
        ends.append(time.time())
        if self._stop_after is not None and len(ends) >= self._stop_after:
            self._hook.remove()
            self.save()
            if dist.is_available() and dist.is_initialized():
                # as st.shutdown() does: no rank closes its connections while another still
                # finishes the last step's collectives (gloo aborted rank 0 once without it)
                dist.barrier()
                dist.destroy_process_group()
            raise SystemExit(0)

    def save(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.write_text(json.dumps(self.record) + "\n", encoding="utf-8")
