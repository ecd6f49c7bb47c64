"""Checkpoints: save and resume the whole training state, stop cleanly before a time limit.

Modules, one job each: layout (folders, LATEST, retention), manifest (checkpoint.json and
checksums), safe_load (no arbitrary unpickling), state (what is saved: the training objects
and each rank's generators), writer (save + atomic publish, background saves), resume (the
newest intact checkpoint), interval (how often to save by default), schedule (when to save,
and the vote in which ranks agree), stop (stop requests and the stop handshake with job
scripts), checkpointer (the user's API).

Nothing is imported here: layout, manifest, interval, schedule and stop need no torch at
import and are read by login-node tools; `scaletrain.Checkpointer` loads the torch part on
first use.
"""
