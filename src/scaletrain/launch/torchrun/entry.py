"""torch.distributed.run, with the script's arguments kept away from torchrun's parser.

`torchrun train.py --run x` fails with "ambiguous option: --run could match --run-path,
--run_path": argparse matches abbreviations even after the script. Here torchrun parses only
its own options and the script's arguments are handed over untouched:

    python -m scaletrain.launch.torchrun.entry [--scratch=DIR] <torchrun options> -- train.py <args>

`--scratch=DIR`: the run's own TMPDIR, removed when torchrun ends. `scaletrain run` removes it
too, but when that is killed outright only torchrun (which it sends SIGTERM) is left to.

Started early by `scaletrain run` (launch/early_start.py), it imports torch first and then
reads those arguments from a pipe: `... entry --command-from-fd <fd>`.
"""

from __future__ import annotations

import shutil
import sys

from torch.distributed.elastic.multiprocessing import SignalException
from torch.distributed.elastic.multiprocessing.errors import record
from torch.distributed.run import parse_args, run

from scaletrain.core.run_record import SEPARATOR
from scaletrain.launch.early_start import COMMAND_FROM_FD, receive_command
from scaletrain.launch.local_run import SCRATCH_OPTION


@record
def main(argv: list[str]) -> None:
    scratch = argv.pop(0).removeprefix(SCRATCH_OPTION) if argv[0].startswith(SCRATCH_OPTION) else ""
    split = argv.index(SEPARATOR)
    script, script_args = argv[split + 1], argv[split + 2 :]
    options = parse_args([*argv[:split], script])  # type: ignore[no-untyped-call]
    options.training_script_args = script_args
    try:
        run(options)  # type: ignore[no-untyped-call]
    finally:
        if scratch:
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    arguments: list[str] | None = sys.argv[1:]
    if sys.argv[1:2] == [COMMAND_FROM_FD]:
        arguments = receive_command(int(sys.argv[2]))
    if arguments is not None:
        try:
            main(arguments)
        except SignalException as stopped:
            # torchrun stops its processes on SIGTERM (a stop, Ctrl-C), then raises this:
            # what they did is the run's to say, not a traceback of torchrun's.
            sys.exit(128 + stopped.sigval)
