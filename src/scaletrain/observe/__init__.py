"""Seeing inside a job: GPU and CPU use on every node, per-rank profiles and their analysis,
and scaling studies.

Login-node parts (reading samples, flags, trace analysis, reports, the scaling fit) import
no torch; only `profile` and `instrument` run inside training processes and import it.
"""
