"""Seeing inside a job: GPU and CPU use on every node, per-rank profiles and their analysis,
and scaling studies.

- `monitor`: the per-node sampler beside training, its samples, and what they show (idle
  GPUs, unequal ranks, memory near the limit): `scaletrain monitor`.
- `profile`: what runs inside the training processes: `st.profile`, the step clock, and the
  instrumented entry that applies both to an unchanged script (`--profile`, `scale`).
- `analysis`: profiler traces read without torch: where each rank's time went, stragglers:
  `scaletrain analyze`.
- `scaling`: a study at several sizes, its fit and report: `scaletrain scale`.

Only `profile.profiler`, `profile.step_clock` and `profile.instrument` import torch; the rest
runs on a login node. `plots` holds the charts that analysis and scaling share.
"""
