"""Checkpoints: save and resume the whole training state, stop cleanly before a time limit.

Modules, one job each: layout (folders, LATEST, retention), manifest (checkpoint.json and
checksums), safe_load (no arbitrary unpickling), training_state (model/optimizer/extras for
DCP), rank_state (per-rank RNG), writer (save + atomic publish, background saves), resume
(newest intact checkpoint), policy (when), vote (ranks agree when), stop (signals and the
stop-request file), handshake (files the job script reads), checkpointer (the user's API).

Nothing is imported here: layout, manifest, policy and handshake need no torch and are read
by login-node tools; `scaletrain.Checkpointer` loads the torch part on first use.
"""
