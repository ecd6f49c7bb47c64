"""The figures docs/checkpoints.md gives, written from the committed results of
checkpoint_cost.py, so that the guide and the results cannot disagree:

    .venv/bin/python benchmarks/checkpoint_figures.py   # rewrites the block in the guide

tests/checkpoint/test_cost_benchmark.py checks that the block is what this writes.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"
GUIDE = Path(__file__).resolve().parents[1] / "docs" / "checkpoints.md"
RUNS = ("checkpoint_cost", "checkpoint_cost_many_tensors")
BEGIN = (
    "<!-- figures: written by `python benchmarks/checkpoint_figures.py` from "
    "benchmarks/results/checkpoint_cost*.json; a test checks that they agree -->"
)
END = "<!-- end of figures -->"


def load(name: str) -> dict[str, Any]:
    record: dict[str, Any] = json.loads((RESULTS / f"{name}.json").read_text(encoding="utf-8"))
    return record


def savers(summary: dict[str, Any]) -> list[str]:
    """scaletrain's savers in a run, one per storage: "scaletrain dcp", ..."""
    return [name for name in summary["mb_per_s"]["save"] if name.startswith("scaletrain ")]


def conditions(record: dict[str, Any]) -> str:
    settings, machine = record["settings"], record["machine"]
    loads = [
        load
        for result in record["by_ranks"].values()
        for load in (
            result["load_average_1_5_15_before"][0],
            result["load_average_1_5_15_after"][0],
        )
    ]
    return (
        f"{settings['state_mb']:,.0f} MB of state ({settings['layers']} × "
        f"Linear({settings['width']}, {settings['width']}) with Adam), {settings['rounds']} "
        f"rounds, run {record['time'][:10]} with torch {machine['torch'].split('+')[0]} on "
        f"{machine['cpus']} cores shared with other work (load average {min(loads):.1f} to "
        f"{max(loads):.1f} at the start and end of each number of ranks)"
    )


def throughput_table(record: dict[str, Any]) -> list[str]:
    first = next(iter(record["by_ranks"].values()))["summary"]
    ours = savers(first)
    storages = [name.removeprefix("scaletrain ") for name in ours]
    head = (
        "| ranks | plain write | plain DCP save | "
        + " | ".join(f"save, `{storage}`" for storage in storages)
        + " | plain read | plain DCP load | "
        + " | ".join(f"load, `{storage}`" for storage in storages)
        + " |"
    )
    lines = [head, "|---" * (3 + 2 * len(ours) + 2) + "|"]
    for ranks, result in record["by_ranks"].items():
        summary = result["summary"]
        cells = [ranks]
        for kind, plain in (("save", "plain write"), ("load", "plain read")):
            rates = summary["mb_per_s"][kind]
            cells += [f"{rates[plain]:,.0f}", f"{rates['plain DCP']:,.0f}"]
            cells += [
                f"{rates[name]:,.0f} ({summary[f'{kind}_vs_plain_DCP'][name]:.2f} ×)"
                for name in ours
            ]
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def loop_table(record: dict[str, Any]) -> list[str]:
    first = next(iter(record["by_ranks"].values()))["summary"]
    who = ["plain DCP", *savers(first)]
    names = ["plain DCP", *(f"`{name.removeprefix('scaletrain ')}`" for name in who[1:])]
    head = "| ranks | " + " | ".join(f"{name}: sync stall, async slowdown" for name in names)
    lines = [head + " |", "|---" * (1 + len(who)) + "|"]
    for ranks, result in record["by_ranks"].items():
        loops = result["summary"]["loops"]
        cells = [ranks]
        for name in who:
            sync, asynchronous = loops[f"{name} sync"], loops[f"{name} async"]
            cells.append(
                f"{sync['stall_s']:.2f} s, {asynchronous['stall_s']:.2f} s "
                f"({asynchronous['slowdown_vs_sync']:.2f}; "
                f"blocked {asynchronous['blocked_s']:.2f} s)"
            )
        lines.append("| " + " | ".join(cells) + " |")
    return lines


def figures() -> str:
    """The block of figures, from the committed results."""
    lines = [BEGIN]
    for name in RUNS:
        record = load(name)
        lines += [
            "",
            f"`benchmarks/results/{name}.json`: {conditions(record)}. MB/s, medians; in "
            "brackets, scaletrain's over plain DCP's:",
            "",
            *throughput_table(record),
            "",
            "What one save costs the training loop: a synchronous save's stall, an asynchronous "
            "one's slowdown (in brackets: over the same saver's synchronous stall, and the time "
            "it blocked the loop):",
            "",
            *loop_table(record),
        ]
    return "\n".join([*lines, "", END])


def replaced(text: str, block: str) -> str:
    """`text` with the block between BEGIN and END (included) replaced by `block`."""
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[:start] + block + text[end:]


def block_in(text: str) -> str:
    start, end = text.index(BEGIN), text.index(END) + len(END)
    return text[start:end]


def main() -> None:
    GUIDE.write_text(replaced(GUIDE.read_text(encoding="utf-8"), figures()), encoding="utf-8")
    print(f"wrote the figures of {GUIDE}", file=sys.stderr)


if __name__ == "__main__":
    main()
