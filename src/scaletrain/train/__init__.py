"""Training helpers: small functions on plain PyTorch objects, not a framework.

model (wrap in DDP, SyncBatchNorm), data (loaders from a global batch), metrics (reduce over
ranks), progress (what rank 0 prints and records), ranks (print0, barrier, rank_zero_first,
seeding). The public names are listed once, in scaletrain/api.py.
"""
