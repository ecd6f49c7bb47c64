"""Training helpers: small functions on plain PyTorch objects, not a framework."""

from scaletrain.train.coordination import barrier, rank_zero_first
from scaletrain.train.data import eval_loader, loader
from scaletrain.train.metrics import mean, mean_over_ranks, sum_over_ranks, total
from scaletrain.train.model import sync_batchnorm, unwrap, wrap
from scaletrain.train.output import print0
from scaletrain.train.progress import Progress
from scaletrain.train.seed import seed_everything

__all__ = [
    "Progress",
    "barrier",
    "eval_loader",
    "loader",
    "mean",
    "mean_over_ranks",
    "print0",
    "rank_zero_first",
    "seed_everything",
    "sum_over_ranks",
    "sync_batchnorm",
    "total",
    "unwrap",
    "wrap",
]
