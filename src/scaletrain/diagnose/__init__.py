"""Find what is wrong with a distributed job in seconds, not hours.

- `preflight`: checks run on every rank before training (launcher, devices, CPU affinity,
  threads, network, run folder, a small all_reduce), gathered into one table.
- `bench`: all_reduce / all_gather / reduce_scatter / broadcast bandwidth over message sizes.
- `doctor`: known failure signatures in a job's logs, with their cause and fix.

Only code that runs inside training processes imports torch, and only when it runs: the
doctor and the report rendering work on a login node without torch.
"""
