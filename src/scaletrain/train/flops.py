"""Model FLOPs of a transformer, for throughput and model FLOPs utilisation (MFU).

PaLM's estimate (Chowdhery et al. 2022, appendix B), as nanoGPT's estimate_mfu uses it:
each token costs 6 FLOPs per parameter (2 forward, 4 backward) plus 12·L·d·T for attention
over T positions in L layers of width d. Recomputed activations are not counted: MFU
measures useful work, so activation checkpointing lowers it.
"""

from __future__ import annotations


def transformer_flops_per_token(
    *, parameters: int, layers: int, width: int, sequence_length: int
) -> float:
    """Training FLOPs (forward + backward) per token of a decoder-only transformer."""
    return 6.0 * parameters + 12.0 * layers * width * sequence_length
