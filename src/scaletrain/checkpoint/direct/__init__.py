"""The direct storage, opt-in with `Checkpointer(storage="direct")`: scaletrain's own
engine under DCP, on private torch entry points, gathered in torch_private.py with the torch
versions it was tested on; on any other version the run uses DCP's public API (storage.py).

Modules: storage (the engine a run holds), stager (the copy at the step boundary),
file_image (one rank's file built in memory, and the early copy), writer (DCP's file
writer with checksums while writing), direct_file (writes around the page cache),
plan_cache (a save of the last layout reuses its plan), torch_private.

Nothing is imported here: importing the package must not import torch's private modules.
"""
