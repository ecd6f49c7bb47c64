"""The direct storage's plan cache: a save whose layout is the last one's reuses its plan.

DCP plans every save anew: each rank makes its local plan, rank 0 gathers them, removes the
duplicates of replicated tensors, makes the global plan and the metadata, scatters the
plans; after the write, rank 0 gathers every rank's write results and broadcasts the
metadata. Four object collectives, and pickling, at every save, which for a state of
thousands of tensors cost more than the write.

The plan depends only on the state's layout: its keys, and each tensor's dtype, shape,
chunks and properties. Non-tensor values are written whole, and their lengths are in the
write results, not in the plan. So each rank still makes its local plan, and when every
rank's equals the one of the last save that succeeded (an exact dataclass comparison, the
dtype included: DCP's own plan cache leaves it out, and wrote a float32 `.metadata` for a
tensor saved as bfloat16), the save skips DCP's global planning and its collectives: one
vote (a tensor all-reduce) on whether every plan is unchanged, the write, and one gather of
every rank's write results and file digests, from which rank 0 writes DCP's `.metadata`
exactly as DCP's `finish` would. The files are the same as DCP's own save writes.
"""

from __future__ import annotations

import pickle
import traceback
from dataclasses import asdict, dataclass
from typing import Any

import torch
import torch.distributed as dist
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultSavePlanner
from torch.distributed.checkpoint.metadata import Metadata
from torch.distributed.checkpoint.planner import SavePlan
from torch.distributed.checkpoint.state_dict_saver import save as dcp_save
from torch.distributed.checkpoint.stateful import Stateful
from torch.distributed.checkpoint.storage import WriteResult

from scaletrain.checkpoint.dcp_storage import gather_digests
from scaletrain.checkpoint.direct.writer import DirectWriter
from scaletrain.checkpoint.manifest import FileDigest
from scaletrain.checkpoint.process_switches import without_dcp_collectives


@dataclass(frozen=True, kw_only=True, slots=True)
class _Plan:
    """What a save that succeeded planned, on this rank."""

    local: SavePlan
    """This rank's local plan, as the planner made it."""
    central: SavePlan
    """The plan rank 0 gave this rank (duplicates removed, storage prefix set)."""
    metadata: Metadata | None
    """DCP's global metadata before the write results (rank 0 only)."""


class _RememberingPlanner(DefaultSavePlanner):
    """DCP's default planner, keeping the plans of the save it plans."""

    local: SavePlan | None = None
    central: SavePlan | None = None
    global_metadata: Metadata | None = None

    def create_local_plan(self) -> SavePlan:
        self.local = super().create_local_plan()
        return self.local

    def create_global_plan(self, all_plans: list[SavePlan]) -> tuple[list[SavePlan], Metadata]:
        plans, self.global_metadata = super().create_global_plan(all_plans)
        return plans, self.global_metadata

    def finish_plan(self, new_plan: SavePlan) -> SavePlan:
        self.central = super().finish_plan(new_plan)
        return self.central


class PlanCache:
    """Saves the shards of one run's checkpoints, remembering the last plan that worked."""

    def __init__(self, *, rank: int, world_size: int, group: dist.ProcessGroup | None) -> None:
        self._rank = rank
        self._world_size = world_size
        self._group = group
        self._last: _Plan | None = None

    def save(self, state: dict[str, Any], writer: DirectWriter) -> dict[str, FileDigest]:
        """Write this rank's shards of `state` with `writer` (a collective); return every
        rank's file digests on rank 0, this rank's elsewhere."""
        planner, unchanged = self._plan_again(state, writer)
        if self._agreed(unchanged):
            assert planner is not None and self._last is not None
            return self._write_as_before(planner, writer, self._last)
        self._last = None  # until a save succeeds with a new plan
        remembering = _RememberingPlanner()
        dcp_save(
            state,
            storage_writer=writer,
            planner=remembering,
            process_group=self._group,
            no_dist=without_dcp_collectives(self._world_size),
        )
        assert remembering.local is not None and remembering.central is not None
        self._last = _Plan(
            local=remembering.local,
            central=remembering.central,
            metadata=remembering.global_metadata,
        )
        return gather_digests(
            writer.fs.digests, rank=self._rank, world_size=self._world_size, group=self._group
        )

    def _plan_again(
        self, state: dict[str, Any], writer: DirectWriter
    ) -> tuple[DefaultSavePlanner | None, bool]:
        """This rank's local plan for `state`, and whether it is the last save's."""
        # DCP calls state_dict() on Stateful values first; a state with any is planned by DCP.
        if self._last is None or any(isinstance(value, Stateful) for value in state.values()):
            return None, False
        planner = DefaultSavePlanner()
        try:
            planner.set_up_planner(
                state_dict=state, storage_meta=writer.storage_meta(), is_coordinator=self._rank == 0
            )
            local = planner.create_local_plan()
        except Exception:  # DCP's own save plans it again, and reports the error on every rank
            return None, False
        return planner, local == self._last.local

    def _agreed(self, unchanged: bool) -> bool:
        """Whether every rank's plan is unchanged (a collective at more than one rank)."""
        if self._world_size == 1:
            return unchanged
        vote = torch.tensor([int(unchanged)])
        dist.all_reduce(vote, op=dist.ReduceOp.MIN, group=self._group)
        return bool(vote.item())

    def _write_as_before(
        self, planner: DefaultSavePlanner, writer: DirectWriter, last: _Plan
    ) -> dict[str, FileDigest]:
        """Write with the last save's plan; rank 0 writes DCP's `.metadata` from it."""
        is_coordinator = self._rank == 0
        writer.set_up_storage_writer(is_coordinator, rank=self._rank, use_collectives=True)
        writer.prepare_local_plan(last.local)  # makes the folder, as in DCP's save
        outcome: tuple[list[WriteResult], dict[str, Any]] | tuple[BaseException, Any]
        try:
            results = writer.write_data(planner.finish_plan(last.central), planner).wait()
            outcome = (
                results,
                {name: asdict(digest) for name, digest in writer.fs.digests.items()},
            )
        except Exception as error:  # every rank raises it, as from DCP's own save
            outcome = _failure(error)
        everyone = self._everyone(outcome)
        failures = {
            rank: each for rank, each in enumerate(everyone) if isinstance(each[0], BaseException)
        }
        if failures:
            self._last = None
            raise CheckpointException("write", failures)
        if not is_coordinator:
            return writer.fs.digests
        assert last.metadata is not None
        writer.finish(metadata=last.metadata, results=[results for results, _ in everyone])
        digests: dict[str, FileDigest] = {}
        for _, theirs in everyone:
            digests |= {name: FileDigest(**value) for name, value in theirs.items()}
        return digests | writer.fs.digests  # with that of .metadata, written just now

    def _everyone(self, value: Any) -> list[Any]:
        if self._world_size == 1:
            return [value]
        gathered: list[Any] = [None] * self._world_size
        dist.all_gather_object(gathered, value, group=self._group)
        return gathered


def _failure(error: Exception) -> tuple[BaseException, traceback.StackSummary]:
    """`error` as DCP passes a rank's failure to the others: with its stack, and pickled
    as itself where it can be."""
    try:
        pickle.dumps(error)
    except Exception:  # an error that does not pickle still reaches every rank, as text
        error = RuntimeError(f"{type(error).__name__}: {error}")
    return error, traceback.extract_tb(error.__traceback__)
