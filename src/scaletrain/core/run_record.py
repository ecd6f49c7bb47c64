"""run.json: how `scaletrain run` started the run's newest local launch, and how it ended.

The launcher writes it when it starts and again when it ends (launch/local_run.py); `status`,
`logs`, `cancel`, `monitor` and `doctor` read it here.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from scaletrain.core.errors import ScaletrainError
from scaletrain.core.files import read_text
from scaletrain.core.run_folder import RunFolder

# Splits torchrun's options from the script and its arguments in the recorded command (see
# launch/torchrun/entry.py).
SEPARATOR = "--"


@dataclass(frozen=True, kw_only=True, slots=True)
class RunRecord:
    """What run.json says about the newest local launch of a run."""

    command: tuple[str, ...]
    host: str = ""
    pid: int | None = None
    started: str = ""
    finished: str | None = None
    exit_code: int | None = None
    duration_s: float | None = None

    @property
    def program(self) -> tuple[str, ...]:
        """The script (or module) and its arguments, as the user gave them."""
        if SEPARATOR in self.command:
            return self.command[self.command.index(SEPARATOR) + 1 :]
        return ()


def read_run_record(folder: RunFolder) -> RunRecord | None:
    """The run's run.json (None for a run never started here); a damaged one is an error."""
    if not folder.run_record.exists():
        return None
    from pydantic import TypeAdapter, ValidationError

    text = read_text(folder.run_record, "run record")
    try:
        return TypeAdapter(RunRecord).validate_python(json.loads(text))
    except json.JSONDecodeError as error:
        problem = f"not JSON ({error})"
    except ValidationError as error:
        problem = "; ".join(
            f"{'.'.join(str(part) for part in detail['loc']) or 'the file'}: {detail['msg']}"
            for detail in error.errors()
        )
    raise ScaletrainError(
        f"{folder.run_record} is not a run record scaletrain can read: {problem}.",
        "it only records how `scaletrain run` started this run: move it away (the next "
        "`scaletrain run` writes a new one); checkpoints, logs and metrics are unaffected.",
    )
