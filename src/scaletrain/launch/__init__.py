"""Local and Slurm launch: start processes, never re-implement a launcher."""
