"""Print this process's layout as scaletrain's launcher detection reads it: one JSON line
(`LAYOUT {...}`), or the error it raises (`ERROR ...`). No torch: it starts in a blink."""

from __future__ import annotations

import dataclasses
import json
import os
import socket

from scaletrain.core.errors import LaunchEnvironmentError
from scaletrain.runtime.launchers import detect_layout

try:
    layout = dataclasses.asdict(detect_layout(os.environ))
    print("LAYOUT " + json.dumps({**layout, "host": socket.gethostname()}), flush=True)
except LaunchEnvironmentError as error:
    print(f"ERROR {error.problem}", flush=True)
