"""torchrun plugin (`--logs-specs scaletrain`): one log file per rank in the run folder.

torchrun's default layout hides them under `<random id>/attempt_N/<local rank>/stdout.log`;
here they are `logs/rank-<global rank>.out` and `.err`, and `logs/restart-N/...` after
an elastic restart. Loaded by torchrun inside the job, so importing torch is fine here.
"""

from __future__ import annotations

import os
from pathlib import Path

from torch.distributed.elastic.multiprocessing.api import LogsDest, LogsSpecs, Std, to_map

from scaletrain.core.run_folder import RunFolder

# torchrun's marker for "leave this stream on the console".
_CONSOLE = ""


class RunFolderLogsSpecs(LogsSpecs):
    """Log destinations named by global rank, flat in the run's logs folder."""

    def __init__(
        self,
        log_dir: str | None = None,
        redirects: Std | dict[int, Std] = Std.NONE,
        tee: Std | dict[int, Std] = Std.NONE,
        local_ranks_filter: set[int] | None = None,
    ) -> None:
        if not log_dir:
            raise ValueError("--logs-specs scaletrain needs --log-dir <run folder>/logs")
        super().__init__(log_dir, redirects, tee, local_ranks_filter)

    @property
    def root_log_dir(self) -> str:
        return str(self._root_log_dir)

    def reify(self, envs: dict[int, dict[str, str]]) -> LogsDest:
        count = len(envs)
        restart = envs[0].get("TORCHELASTIC_RESTART_COUNT", "0") if count else "0"
        folder = RunFolder(Path(self.root_log_dir).parent).attempt_logs(int(restart))
        folder.mkdir(parents=True, exist_ok=True)

        redirects, tees = to_map(self._redirects, count), to_map(self._tee, count)
        destination = LogsDest()
        for local_rank, env in envs.items():
            rank = env.get("RANK", str(local_rank))
            # A tee'd stream is written to its file and tailed from there to the console.
            streams = redirects[local_rank] | tees[local_rank]
            shown = self._local_ranks_filter is None or local_rank in self._local_ranks_filter
            for kind, suffix, files, tee_files in (
                (Std.OUT, "out", destination.stdouts, destination.tee_stdouts),
                (Std.ERR, "err", destination.stderrs, destination.tee_stderrs),
            ):
                path = str(folder / f"rank-{rank}.{suffix}")
                console = _CONSOLE if shown else os.devnull
                files[local_rank] = path if streams & kind else console
                if tees[local_rank] & kind and shown:
                    tee_files[local_rank] = path
            error_file = str(folder / f"rank-{rank}.error.json")
            destination.error_files[local_rank] = error_file
            env["TORCHELASTIC_ERROR_FILE"] = error_file
        destination.filtered_stdout = str(folder / "filtered.out")
        destination.filtered_stderr = str(folder / "filtered.err")
        return destination
