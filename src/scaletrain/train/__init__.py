"""Training helpers: small functions on plain PyTorch objects, not a framework.

strategies/ (st.wrap: DDP, FSDP2, HSDP, DeepSpeed ZeRO; precision, recomputation, the
training step), data (loaders from a global batch), metrics (reduce over ranks), measures
(peak memory, FLOPs per token), progress (what rank 0 prints and records), ranks (print0,
barrier, rank_zero_first, seeding). The public names are listed once, in scaletrain/api.py.
"""
