"""Checkpointer: save the whole training state, resume it, and stop cleanly when asked.

    ckpt = st.Checkpointer(model=model, optimizer=optimizer)  # resumes this run if it can
    progress = st.Progress(total_steps, samples_per_step=256, start_step=ckpt.step)
    for epoch in ckpt.epochs(10):                  # continues at the saved epoch
        for x, y in ckpt.batches(train_loader):    # the rest of that epoch, in the same order
            ...                                    # your step, unchanged

The loop stays yours: `epochs` and `batches` only count, and at each step boundary (when
the loop asks for the next batch) save when due or stop when asked.
"""

from __future__ import annotations

import itertools
import os
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

import torch
import torch.distributed as dist
from torch import nn
from torch.optim import Optimizer
from torch.utils.data import DataLoader
from torch.utils.data.distributed import DistributedSampler

from scaletrain.checkpoint import stop
from scaletrain.checkpoint.interval import AUTO
from scaletrain.checkpoint.layout import CheckpointStore, checkpoint_name
from scaletrain.checkpoint.manifest import Position
from scaletrain.checkpoint.rehearsal import Rehearsal
from scaletrain.checkpoint.resume import Resumed, load_newest
from scaletrain.checkpoint.schedule import Ballot, SavePolicy, StepVote
from scaletrain.checkpoint.state import (
    HasState,
    TrainingObjects,
    capture_rank_state,
    restore_random,
    saved_loader_generator,
)
from scaletrain.checkpoint.stop import StopRequests, TrainingStopped
from scaletrain.checkpoint.storage import StorageName, open_storage
from scaletrain.checkpoint.writer import BackgroundWriter, SaveJob, SaveTarget
from scaletrain.core.run_folder import DEFAULT_RUNS_DIR, RunFolder, default_run_name
from scaletrain.runtime import heartbeat
from scaletrain.runtime.layout import DistEnv
from scaletrain.runtime.process_group import before_shutdown, current_env, new_group
from scaletrain.train.data import EpochSampler
from scaletrain.train.ranks import print0

Batch = TypeVar("Batch")


def _bookkeeping_groups(
    env: DistEnv, asynchronous: bool
) -> tuple[dist.ProcessGroup | None, dist.ProcessGroup | None]:
    """The groups of (the vote, the writer): the training's own group where that is safe, a
    CPU group of their own only where needed, so that large jobs open as few sockets as
    they can (a gloo group is a full mesh: N-1 connections per process).

    The vote runs on the main thread between steps, in the same order on every rank, so the
    default group serves it when that is gloo; NCCL would need a GPU tensor and a GPU sync.
    A background writer runs its collectives from another thread, where sharing a group
    with the main thread could interleave differently on different ranks: it gets a group
    of its own (DCP's `async_save` needs a CPU one, even in a world of one). None means the
    default group.
    """
    if env.world_size == 1 and env.backend == "gloo":
        return None, None
    side = None if env.backend == "gloo" else new_group(backend="gloo")
    writer = new_group(backend="gloo") if asynchronous else side
    return side, writer


class Checkpointer:
    """Saves and resumes model, optimizer, scheduler, scaler, data position and RNG states."""

    def __init__(
        self,
        *,
        model: nn.Module,
        optimizer: Optimizer | Sequence[Optimizer] | None = None,
        scheduler: HasState | None = None,
        scaler: HasState | None = None,
        every_steps: int | None = None,
        every_minutes: float | Literal["auto"] | None = AUTO,
        keep: int = 3,
        asynchronous: bool = False,
        pin_staging: bool = True,
        storage: StorageName = "dcp",
        enabled: bool = True,
        run_dir: str | Path | None = None,
        stop_check_seconds: float = 5.0,
    ) -> None:
        """Resume from the newest intact checkpoint of this run, if there is one.

        Every rank must create it, after the model, optimizer and scheduler. Checkpoints go to
        <run folder>/checkpoints/ (the run folder of `scaletrain run` or a generated job, or
        `run_dir`). Besides every `every_steps` steps and/or `every_minutes` minutes (default
        "auto": as often as keeps saving at about 2% of the time, measured), it saves
        when a stop is requested (SIGTERM, SIGUSR1, the stop-requested file; checked every
        `stop_check_seconds` s) and when training ends. `asynchronous=True` writes periodic
        checkpoints in the background after a copy to CPU memory, page-locked where a GPU is
        unless `pin_staging=False`. `storage` chooses how files are written: "dcp", DCP's
        public API, or the opt-in "direct" (see docs/checkpoints.md). With
        `enabled=False` nothing is saved or resumed and the loops behave like plain loops.
        """
        self.enabled = enabled
        self.step = 0
        """Optimizer steps completed; inside a `batches` loop, including the current one."""
        self.epoch = 0
        """The epoch in progress (or the next one)."""
        self._batches_in_epoch = 0
        self._env = current_env()
        self._pending_rank_state: dict[str, Any] | None = None
        self._loader_generator: torch.Generator | None = None
        self._epoch_start_generator: torch.Tensor | None = None
        self._rehearsal: Rehearsal | None = None
        if not enabled:
            return
        optimizers = [optimizer] if isinstance(optimizer, Optimizer) else list(optimizer or ())
        extras = {"scheduler": scheduler, "scaler": scaler}
        self._objects = TrainingObjects(
            model=model,
            optimizers=optimizers,
            others={name: thing for name, thing in extras.items() if thing is not None},
        )
        self._policy = SavePolicy(every_steps=every_steps, every_minutes=every_minutes, keep=keep)
        self._asynchronous = asynchronous
        self._folder = self._choose_folder(run_dir)
        vote_group, writer_group = _bookkeeping_groups(self._env, asynchronous)
        self._target = SaveTarget(
            store=CheckpointStore(self._folder.checkpoints),
            rank=self._env.rank,
            world_size=self._env.world_size,
            group=writer_group,
            keep=self._policy.keep,
            device=self._env.device,
            cores=self._env.cpu_count,
        )
        self._writer = BackgroundWriter(
            self._target,
            open_storage(storage, self._target, pin=pin_staging, asynchronous=asynchronous),
        )
        # Asynchronous saves of a storage that copies what only optimizer steps change in
        # the background make the next step wait for that copy, where every step is hooked.
        self._copy_in_background = (
            asynchronous
            and self._writer.storage.copies_in_background
            and self._objects.steps_can_be_hooked
        )
        if self._copy_in_background:
            for each in optimizers:
                each.register_step_pre_hook(self._writer.before_step)
        if asynchronous:
            before_shutdown(self._writer.wait)  # st.shutdown() with a save in flight
        self._vote = StepVote(vote_group, self._env.world_size, is_main=self._env.is_main)
        self._last_saved_step = -1
        self._last_save_time = time.monotonic()
        self._last_save_seconds: float | None = None  # how long the last save stalled the loop
        self._resume()
        self._stop_requests = StopRequests(
            request_file=self._folder.stop_request if self._env.is_main else None,
            poll_seconds=stop_check_seconds,
        )
        self._stop_requests.install()
        self._rehearsal = Rehearsal.from_environ(os.environ)  # `scaletrain submit --rehearse`

    def _choose_folder(self, run_dir: str | Path | None) -> RunFolder:
        if run_dir is not None:
            return RunFolder(Path(run_dir))
        if self._env.run_folder is not None:
            return self._env.run_folder
        # Started without scaletrain's launcher: a new run, named as `scaletrain run` names
        # one; rank 0's clock decides, so that every rank writes into the same folder.
        name = default_run_name(sys.argv[0], datetime.now()) if self._env.is_main else None
        if self._env.world_size > 1:
            box = [name]
            dist.broadcast_object_list(box, src=0)
            name = box[0]
        folder = RunFolder(DEFAULT_RUNS_DIR / str(name))
        print0(
            f"scaletrain: checkpoints go to {folder.checkpoints} (no run folder set; to resume "
            "a run, start it again with the same `scaletrain run --name`, in a generated job, "
            "or with Checkpointer(run_dir=...))",
            file=sys.stderr,
        )
        return folder

    @property
    def position(self) -> Position:
        return Position(step=self.step, epoch=self.epoch, batches_in_epoch=self._batches_in_epoch)

    def _resume(self) -> None:
        previous_stop = None
        if self._env.is_main:
            # Before any rank can write: rank 0's broadcast in load_newest waits for this.
            self._target.store.remove_unfinished()
            previous_stop = stop.clear_stop_files(self._folder)
        resumed = load_newest(self._objects, self._target)
        if resumed is not None:
            self._continue_from(resumed, previous_stop)

    def _continue_from(self, resumed: Resumed, previous_stop: dict[str, Any] | None) -> None:
        position = resumed.manifest.position
        self.step, self.epoch = position.step, position.epoch
        self._batches_in_epoch = position.batches_in_epoch
        self._last_saved_step = self.step
        self._pending_rank_state = resumed.rank_state
        if resumed.rank_state is not None:
            restore_random(resumed.rank_state, self._env.device)
        saved_by = resumed.manifest.world_size
        if not self._env.is_main:
            return
        stop.record_resume(
            self._folder,
            checkpoint=resumed.folder,
            position=position,
            world_size=self._env.world_size,
            saved_world_size=saved_by,
            previous_stop=previous_stop,
            environ=os.environ,
        )
        print0(
            f"scaletrain: resumed from {resumed.folder} (step {self.step}, epoch {self.epoch}, "
            f"saved by {saved_by} process(es), now {self._env.world_size})",
            file=sys.stderr,
        )

    def epochs(self, total: int) -> Iterator[int]:
        """Epoch numbers from the resumed one up to `total` - 1; saves at the end."""
        if self.step > 0 and self.epoch >= total:
            print0(
                f"scaletrain: this run finished all {total} epochs already (step {self.step}); "
                "nothing to train. Ask for more epochs to continue it, or give another --name "
                "for a new run.",
                file=sys.stderr,
            )
        if self._rehearsal is not None:
            self._rehearsal.epochs = total
        while self.epoch < total:
            epoch = self.epoch
            yield epoch
            if self.epoch == epoch:  # the body did not finish a pass of `batches`
                self.epoch, self._batches_in_epoch = epoch + 1, 0
        if self.enabled:
            self._vote.result(self.step)  # settle the vote still in flight
            self.save(reason="end")
            self._stop_requests.uninstall()

    def batches(self, loader: Iterable[Batch]) -> Iterator[Batch]:
        """One epoch of `loader` (its rest, when resumed mid-epoch); each batch is one step."""
        iterator = self._start_epoch(loader)
        heartbeat.enter_phase("loop")
        for batch in iterator:
            self.step += 1
            self._batches_in_epoch += 1
            yield batch
            heartbeat.note_step(self.step)
            if self.enabled:
                self._at_step_boundary()
        heartbeat.enter_phase("outside")  # evaluation, usually: no steps for a while
        self.epoch, self._batches_in_epoch = self.epoch + 1, 0
        self._epoch_start_generator = None

    def _start_epoch(self, loader: Iterable[Batch]) -> Iterator[Batch]:
        """Iterate the epoch's order from where it stopped, with the saved run's RNG."""
        saved = self._pending_rank_state
        generator = getattr(loader, "generator", None)
        if isinstance(generator, torch.Generator) and self.enabled:
            saved_generator = saved_loader_generator(saved) if saved else None
            if saved_generator is not None:
                generator.set_state(saved_generator)
            self._loader_generator = generator
            self._epoch_start_generator = generator.get_state()
        sampler = getattr(loader, "sampler", None)
        batch_size = loader.batch_size if isinstance(loader, DataLoader) else None
        skip = self._batches_in_epoch
        exact = isinstance(sampler, EpochSampler) and batch_size is not None
        if isinstance(sampler, EpochSampler):
            # Skip the consumed samples themselves; other samplers are fast-forwarded below.
            sampler.start_at(self.epoch, skip=skip * batch_size if batch_size else 0)
        elif isinstance(sampler, DistributedSampler):
            sampler.set_epoch(self.epoch)
        iterator = iter(loader)
        if self._rehearsal is not None:
            self._rehearsal.note_loader(loader, self._env.world_size)
        if skip and not exact:
            print0(
                f"scaletrain: fast-forwarding {skip} batches to the resumed position",
                file=sys.stderr,
            )
            iterator = itertools.islice(iterator, skip, None)
        if saved is not None:
            # Again after iter(): where the saved run's generators were at this point.
            restore_random(saved, self._env.device)
            self._pending_rank_state = None
        return iterator

    def _at_step_boundary(self) -> None:
        if self._rehearsal is not None:
            self._rehearse(self._rehearsal)
        agreed = self._vote.result(self.step)
        if agreed is not None and agreed.stop:
            self._stop(agreed.stop_reason)
        if self._policy.due_by_steps(self.step) or (agreed is not None and agreed.save_due):
            reason = self._policy.reason(self.step, self._last_save_seconds)
            self._save(reason, blocking=not self._asynchronous)
        if not self._vote.due(self.step):
            return
        is_main = self._env.is_main
        self._vote.start(
            self.step,
            Ballot(
                stop_signal=self._stop_requests.signal_number,
                stop_file=is_main and self._stop_requests.file_seen(),
                save_due=is_main
                and self._policy.due_by_time(
                    time.monotonic() - self._last_save_time, self._last_save_seconds
                ),
            ),
        )

    def _rehearse(self, rehearsal: Rehearsal) -> None:
        """A rehearsal's save, resume through `_continue_from`, and stop (rehearsal.py)."""
        due = rehearsal.at_step(self.step)
        if due == "resume":
            rehearsal.save_and_resume(
                self._objects.model, save=lambda: self.save(reason="rehearsal"), resume=self._reload
            )
        elif due == "stop":
            rehearsal.finish(self._folder, self._env)
            self._stop("rehearsal")

    def _reload(self) -> None:
        resumed = load_newest(self._objects, self._target)
        assert resumed is not None, "a checkpoint was saved just before"
        self._continue_from(resumed, previous_stop=None)
        self._pending_rank_state = None  # the loader goes on as it is: nothing to replay

    def save(self, *, reason: str = "save()") -> None:
        """Save now and wait until the checkpoint is complete (every rank must call this)."""
        if self.enabled:
            self._save(reason, blocking=True)
            self._writer.wait()

    def _save(self, reason: str, *, blocking: bool) -> None:
        if self.step == self._last_saved_step:
            return
        left = heartbeat.enter_phase("save")  # the watchdog does not count a save as a hang
        started = time.monotonic()
        self._writer.wait()
        epoch_start = self._epoch_start_generator
        if epoch_start is None and self._loader_generator is not None:
            epoch_start = self._loader_generator.get_state()  # between epochs: the next start
        job = SaveJob(
            position=self.position,
            reason=reason,
            state=self._objects.state_dict(),
            rank_state=capture_rank_state(self._env.device, epoch_start),
        )
        if blocking:
            self._writer.write_now(job)
        else:
            in_background = self._copy_in_background
            later = self._objects.changed_only_by_steps() if in_background else frozenset()
            self._writer.submit(job, later=later)
        self._last_saved_step = self.step
        self._last_save_time = time.monotonic()
        self._last_save_seconds = self._last_save_time - started
        heartbeat.enter_phase(left)

    def _stop(self, reason: str) -> None:
        """Save, tell the job script, and leave with exit code 0 on every rank."""
        heartbeat.enter_phase("save")  # until the process leaves
        self.save(reason=f"stop: {reason}")
        if self._env.is_main:
            stop.write_stopped(
                self._folder,
                position=self.position,
                reason=reason,
                checkpoint=self._target.store.root / checkpoint_name(self.step),
            )
        if self._env.world_size > 1:
            dist.barrier(group=self._target.group)  # nobody leaves before stopped.json exists
        self._stop_requests.uninstall()
        print0(
            f"scaletrain: stopped at step {self.step} ({reason}); run again to resume",
            file=sys.stderr,
        )
        raise TrainingStopped(step=self.step, reason=reason)
