"""GPU and CPU use on every node: `python -m scaletrain.observe.monitor.sampler` beside
training, read by `scaletrain monitor`.

samples (the JSON lines one node's sampler writes), sampler (the loop) with ranks (which
processes are this run's ranks), gpus (NVML, AMD SMI) and tensorboard_events; usage (means,
peaks and flags); plots. A local run starts and stops the sampler in launch/sampler_process.py.
"""
