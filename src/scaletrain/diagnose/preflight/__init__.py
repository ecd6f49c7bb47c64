"""Preflight checks on every rank before training: `python -m scaletrain.diagnose.preflight`.

run (the entry point: join, gather, report), inputs (what the checks expect), checks by
scope: local_checks and devices (this rank), rendezvous (before joining), group_checks (on
the group), job_checks (across ranks), gpu (NCCL/RCCL facts); results and report (show).
"""
