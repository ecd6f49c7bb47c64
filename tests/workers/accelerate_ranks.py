"""Each process of `accelerate launch` reports its place and arguments, after an all-reduce
that needs every process (accelerate's own API only). Writes <out>/rank-<N>.json."""

from __future__ import annotations

import json
import os
import socket
import sys
from pathlib import Path

import torch
from accelerate import Accelerator

accelerator = Accelerator()
total = accelerator.reduce(torch.tensor([accelerator.process_index + 1.0]), reduction="sum")
report = {
    "rank": accelerator.process_index,
    "local_rank": accelerator.local_process_index,
    "world_size": accelerator.num_processes,
    "distributed_type": str(accelerator.distributed_type),
    "machine_rank": int(os.environ["GROUP_RANK"]),
    "host": socket.gethostname(),
    "argv": sys.argv[1:],
    "total_of_rank_plus_one": float(total.item()),
}
folder = Path(os.environ["PROBE_DIR"])
(folder / f"rank-{accelerator.process_index}.json").write_text(json.dumps(report))
accelerator.end_training()
