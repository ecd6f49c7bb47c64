"""Exercise the helpers that need several ranks: metrics, rank-0-first, print0, env."""

from __future__ import annotations

import argparse
import json
import socket
import time
from pathlib import Path

import scaletrain as st


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    env = st.init()

    marker = args.out / "prepared-by-rank-0"
    with st.rank_zero_first():
        if env.rank == 0:
            time.sleep(1.0)  # a slow "download": the others must still find it finished
            marker.write_text("ready")
        found_ready = marker.is_file()

    st.print0("printed once")
    result = {
        "rank": env.rank,
        "world_size": env.world_size,
        "local_rank": env.local_rank,
        "node_rank": env.node_rank,
        "num_nodes": env.num_nodes,
        "master_addr": env.master_addr,
        "hostname": socket.gethostname(),
        "launcher": env.launcher,
        "device": str(env.device),
        "backend": env.backend,
        "mean_of_rank": st.mean(env.rank),
        "total_of_rank_plus_one": st.total(env.rank + 1),
        "many": st.mean_over_ranks({"a": float(env.rank), "b": 10.0}),
        "found_ready": found_ready,
    }
    (args.out / f"rank{env.rank}.json").write_text(json.dumps(result))
    st.shutdown()


if __name__ == "__main__":
    main()
