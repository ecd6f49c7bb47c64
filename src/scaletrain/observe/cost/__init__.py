"""What a run cost, after the job: `scaletrain cost` (docs/cost.md).

history (the steps of metrics/train.jsonl and the resumes of resumes.jsonl, grouped into
starts of the training processes), attempts (Slurm's runs of the job: billed time, and the time
whose work was not kept), energy (GPU power and idle GPUs from the monitor's samples), report
(all of it for one run, in billing units) and plot. No torch: it runs on login nodes.
"""
