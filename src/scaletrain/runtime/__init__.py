"""Inside each training process: which launcher, which rank, which device, which group."""

from scaletrain.runtime.launchers import detect_layout
from scaletrain.runtime.layout import DistEnv, ProcessLayout
from scaletrain.runtime.process_group import current_env, init, shutdown

__all__ = ["DistEnv", "ProcessLayout", "current_env", "detect_layout", "init", "shutdown"]
