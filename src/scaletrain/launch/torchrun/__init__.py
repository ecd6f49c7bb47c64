"""Code that runs inside torchrun's own process (not the workers): the plugin that names the
per-rank log files, and the entry point that keeps the script's arguments away from
torchrun's parser. The only part of launch/ that imports torch."""
