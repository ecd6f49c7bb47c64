"""Collective bandwidth: `python -m scaletrain.diagnose.bench` (`scaletrain bench`).

run (the entry point), bandwidth (timing loop and nccl-tests' busbw), pairs (node pairs),
report (tables, JSON, PNG).
"""
