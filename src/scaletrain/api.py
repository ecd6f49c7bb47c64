"""The training API, `import scaletrain as st; st.init(); st.wrap(...)`: every public name,
listed once, as plain imports (type checkers read them). `import scaletrain` does not import
this module: it reads these lines and loads each name's own module on its first use (see
__init__.py), so keep to one `from <module> import <name> as <name>` per line."""

from scaletrain.checkpoint.checkpointer import Checkpointer as Checkpointer
from scaletrain.checkpoint.stop import TrainingStopped as TrainingStopped
from scaletrain.observe.profile.profiler import profile as profile
from scaletrain.runtime.layout import DistEnv as DistEnv
from scaletrain.runtime.process_group import current_env as current_env
from scaletrain.runtime.process_group import init as init
from scaletrain.runtime.process_group import shutdown as shutdown
from scaletrain.train.data import eval_loader as eval_loader
from scaletrain.train.data import loader as loader
from scaletrain.train.measures import transformer_flops_per_token as transformer_flops_per_token
from scaletrain.train.metrics import mean as mean
from scaletrain.train.metrics import mean_over_ranks as mean_over_ranks
from scaletrain.train.metrics import sum_over_ranks as sum_over_ranks
from scaletrain.train.metrics import total as total
from scaletrain.train.progress import Progress as Progress
from scaletrain.train.ranks import barrier as barrier
from scaletrain.train.ranks import print0 as print0
from scaletrain.train.ranks import rank_zero_first as rank_zero_first
from scaletrain.train.ranks import seed_everything as seed_everything
from scaletrain.train.strategies.ddp import sync_batchnorm as sync_batchnorm
from scaletrain.train.strategies.training import Wrapped as Wrapped
from scaletrain.train.strategies.wrap import unwrap as unwrap
from scaletrain.train.strategies.wrap import wrap as wrap
